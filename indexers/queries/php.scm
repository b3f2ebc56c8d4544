; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; Attributes (#[...]) are part of a declaration, so they come with it. Namespaces are not
; containers: braced `namespace X { class A }` and `namespace X; class A` both give `A`.
(class_declaration name: (name) @name) @definition.class
(interface_declaration name: (name) @name) @definition.interface
(trait_declaration name: (name) @name) @definition.trait
(enum_declaration name: (name) @name) @definition.enum
(function_definition name: (name) @name) @definition.function
(method_declaration name: (name) @name) @definition.method
; $handler = function (...) {...}; $f = fn ($x) => ...
(assignment_expression
  left: (variable_name (name) @name)
  right: [(anonymous_function) (arrow_function)]) @definition.function

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(compound_statement) (declaration_list) (switch_block) (enum_declaration_list)
 (colon_block)] @block
