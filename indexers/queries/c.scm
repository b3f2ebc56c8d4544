; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; The declarator nests pointers around the function name: int *f(void), char **g(void).
(function_definition
  declarator: [
    (function_declarator declarator: (identifier) @name)
    (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    (pointer_declarator
      declarator: (pointer_declarator
        declarator: (function_declarator declarator: (identifier) @name)))
  ]) @definition.function
(struct_specifier name: (type_identifier) @name body: (field_declaration_list)) @definition.struct
(union_specifier name: (type_identifier) @name body: (field_declaration_list)) @definition.struct
(enum_specifier name: (type_identifier) @name body: (enumerator_list)) @definition.enum
; typedef struct { ... } name; (a named struct inside a typedef is found by the pattern above)
(type_definition
  type: [
    (struct_specifier !name body: (field_declaration_list))
    (union_specifier !name body: (field_declaration_list))
    (enum_specifier !name body: (enumerator_list))
  ]
  declarator: (type_identifier) @name) @definition.struct

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(compound_statement) (field_declaration_list) (enumerator_list) (initializer_list)
 (preproc_if) (preproc_ifdef) (preproc_else) (preproc_elif)] @block
