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
(conversion_operator_declaration type: _ @name) @definition.method
(delegate_declaration name: (identifier) @name) @definition.type
; static Func<Type, ITypeMap> Provider = type => ...: a field holding a lambda
(field_declaration
  (variable_declaration
    (variable_declarator
      name: (identifier) @name
      [(lambda_expression) (anonymous_method_expression)]))) @definition.method
; Properties, indexers and events with code in them are members like methods; an automatic
; property (`{ get; set; }`) is data, like a field, and stays in its type's span.
(property_declaration
  name: (identifier) @name
  accessors: (accessor_list (accessor_declaration body: (_)))) @definition.method
(property_declaration name: (identifier) @name value: (arrow_expression_clause)) @definition.method
(indexer_declaration
  "this" @name
  accessors: (accessor_list (accessor_declaration body: (_)))) @definition.method
(indexer_declaration "this" @name value: (arrow_expression_clause)) @definition.method
(event_declaration
  name: (identifier) @name
  accessors: (accessor_list (accessor_declaration body: (_)))) @definition.method

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(block) (declaration_list) (switch_body) (enum_member_declaration_list)
 (accessor_list)] @block
