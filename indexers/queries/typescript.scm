; Used by both TypeScript grammars (typescript and tsx).
; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
(class_declaration name: (type_identifier) @name) @definition.class
(abstract_class_declaration name: (type_identifier) @name) @definition.class
(interface_declaration name: (type_identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(type_alias_declaration name: (type_identifier) @name) @definition.type
(internal_module name: (_) @name) @definition.namespace
(module name: (_) @name) @definition.module
(method_definition name: (_) @name) @definition.method
(abstract_method_signature name: (_) @name) @definition.method
(function_declaration name: (identifier) @name) @definition.function
(generator_function_declaration name: (identifier) @name) @definition.function
(function_signature name: (identifier) @name) @definition.function
; const f = () => {} and const f = function () {}: the whole declaration is the span
(lexical_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function
(variable_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function
; class fields holding a function: handleClick = () => {...}
(public_field_definition
  name: (property_identifier) @name
  value: [(arrow_function) (function_expression)]) @definition.method

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc
(decorator) @doc

; Statement lists: an oversized unit may be cut between their children.
[(statement_block) (class_body) (switch_body) (interface_body) (enum_body)] @block
