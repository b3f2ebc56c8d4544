; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; Attributes ([Obsolete]) are part of a declaration, so they come with it. Namespaces are not
; containers: `namespace A { class B }` and file-scoped `namespace A; class B` both give `B`.
(class_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(struct_declaration name: (identifier) @name) @definition.struct
(interface_declaration name: (identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(destructor_declaration name: (identifier) @name) @definition.method
(operator_declaration operator: _ @name) @definition.method
(local_function_statement name: (identifier) @name) @definition.function

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(block) (declaration_list) (switch_body) (enum_member_declaration_list)
 (accessor_list)] @block
