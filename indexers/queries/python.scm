; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; A decorated definition is captured whole so its decorators stay with it.
(class_definition name: (identifier) @name) @definition.class
(function_definition name: (identifier) @name) @definition.function
(decorated_definition
  definition: (class_definition name: (identifier) @name)) @definition.class
(decorated_definition
  definition: (function_definition name: (identifier) @name)) @definition.function
; f = lambda x: ...: a lambda bound to a name is a function of that name
(expression_statement
  (assignment left: (identifier) @name right: (lambda))) @definition.function

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
(block) @block
