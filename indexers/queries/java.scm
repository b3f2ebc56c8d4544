; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; Annotations are part of a declaration's modifiers, so they come with it.
(class_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(interface_declaration name: (identifier) @name) @definition.interface
(annotation_type_declaration name: (identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(compact_constructor_declaration name: (identifier) @name) @definition.method
; static final Comparator<Node> BY_NAME = (a, b) -> ...: a field holding a lambda
(field_declaration
  declarator: (variable_declarator name: (identifier) @name value: (lambda_expression))
  ) @definition.method

; Leading trivia: attached to the definition that follows without a blank line.
(line_comment) @doc
(block_comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(block) (constructor_body) (class_body) (interface_body) (enum_body) (switch_block)] @block
