; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; @parent names the type a method belongs to (its receiver), for methods declared outside it.
(function_declaration name: (identifier) @name) @definition.function
(method_declaration
  receiver: (parameter_list
    (parameter_declaration
      type: [
        (type_identifier) @parent
        (pointer_type (type_identifier) @parent)
        (generic_type type: (type_identifier) @parent)
        (pointer_type (generic_type type: (type_identifier) @parent))
      ]))
  name: (field_identifier) @name) @definition.method
(type_spec name: (type_identifier) @name type: (struct_type)) @definition.struct
(type_spec name: (type_identifier) @name type: (interface_type)) @definition.interface
; every other named type (type HandlerFunc func(*Context), type Params []Param) and alias
(type_spec name: (type_identifier) @name) @definition.type
(type_alias name: (type_identifier) @name) @definition.type
; var handler = func(...) {...}
(var_spec
  name: (identifier) @name
  value: (expression_list . (func_literal) .)) @definition.function

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(statement_list) (field_declaration_list) (expression_switch_statement)
 (type_switch_statement) (select_statement)] @block
