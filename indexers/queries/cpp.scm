; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; Out-of-line members keep their qualified name: `Cache::find` becomes the symbol Cache.find.
(function_definition
  declarator: [
    (function_declarator declarator: [(identifier) (field_identifier) (qualified_identifier)
                                      (operator_name) (destructor_name)] @name)
    (pointer_declarator
      declarator: (function_declarator
        declarator: [(identifier) (field_identifier) (qualified_identifier)
                     (operator_name)] @name))
    (reference_declarator
      (function_declarator
        declarator: [(identifier) (field_identifier) (qualified_identifier)
                     (operator_name)] @name))
  ]) @definition.function
(template_declaration
  (function_definition
    declarator: [
      (function_declarator declarator: [(identifier) (field_identifier) (qualified_identifier)
                                        (operator_name) (destructor_name)] @name)
      (pointer_declarator
        declarator: (function_declarator
          declarator: [(identifier) (field_identifier) (qualified_identifier)
                     (operator_name)] @name))
      (reference_declarator
        (function_declarator
          declarator: [(identifier) (field_identifier) (qualified_identifier)
                     (operator_name)] @name))
    ])) @definition.function
(class_specifier name: (_) @name body: (field_declaration_list)) @definition.class
(struct_specifier name: (_) @name body: (field_declaration_list)) @definition.struct
(union_specifier name: (_) @name body: (field_declaration_list)) @definition.struct
(enum_specifier name: (_) @name body: (enumerator_list)) @definition.enum
(template_declaration
  [(class_specifier name: (_) @name body: (field_declaration_list))
   (struct_specifier name: (_) @name body: (field_declaration_list))]) @definition.class
(namespace_definition name: (_) @name body: (declaration_list)) @definition.namespace

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(compound_statement) (field_declaration_list) (declaration_list) (enumerator_list)
 (initializer_list) (preproc_if) (preproc_ifdef) (preproc_else) (preproc_elif)] @block
