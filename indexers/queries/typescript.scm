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
; const A = class {}
(lexical_declaration
  (variable_declarator name: (identifier) @name value: (class))) @definition.class
(variable_declaration
  (variable_declarator name: (identifier) @name value: (class))) @definition.class
; Members assigned a function: Layer.prototype.match = function () {} is the method Layer.match;
; res.send = function send() {}, exports.json = ..., module.exports = ..., this.x = ... and
; a.b.c = ... keep the object they are set on (res.send). A chain (res.type = res.contentType =
; function () {}) is named by its first target.
(assignment_expression
  left: (member_expression
    object: (member_expression
      object: (_) @parent
      property: (property_identifier) @_prototype (#eq? @_prototype "prototype"))
    property: (property_identifier) @name)
  right: [(function_expression) (arrow_function) (generator_function)
          (assignment_expression right: [(function_expression) (arrow_function) (generator_function)])]) @definition.function
(assignment_expression
  left: (member_expression
    object: [(identifier) (this)
             (member_expression
               property: (property_identifier) @_object (#not-eq? @_object "prototype"))
            ] @parent
    property: (property_identifier) @name)
  right: [(function_expression) (arrow_function) (generator_function)
          (assignment_expression right: [(function_expression) (arrow_function) (generator_function)])]) @definition.function
(assignment_expression left: (identifier) @name right: [(function_expression) (arrow_function) (generator_function)]) @definition.function
; module.exports = class Application Ellipsis, exports.Router = class Ellipsis
(assignment_expression
  left: (member_expression
    object: [(identifier) (this) (member_expression)] @parent
    property: (property_identifier) @name)
  right: (class)) @definition.class
(assignment_expression left: (identifier) @name right: (class)) @definition.class
; An object literal of functions bound to a name is their container: exports.codecs = {json() {}}
; gives exports.codecs.json (an object without functions stays a statement)
(lexical_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(object (pair value: [(function_expression) (arrow_function)]))
            (object (method_definition))])) @definition.object
(variable_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(object (pair value: [(function_expression) (arrow_function)]))
            (object (method_definition))])) @definition.object
(assignment_expression
  left: [(identifier) @name
         (member_expression
           object: [(identifier) (this) (member_expression)] @parent
           property: (property_identifier) @name)]
  right: [(object (pair value: [(function_expression) (arrow_function)]))
          (object (method_definition))]) @definition.object
; Object literal members holding a function: { toJSON: function () {}, 'get': () => x }
(pair
  key: (property_identifier) @name
  value: [(function_expression) (arrow_function) (generator_function)]) @definition.function
(pair
  key: (string (string_fragment) @name)
  value: [(function_expression) (arrow_function) (generator_function)]) @definition.function
; defineGetter(req, 'fresh', function () {}): an object, a member's name, its function
(call_expression
  arguments: (arguments
    .
    (member_expression
      object: (_) @parent
      property: (property_identifier) @_prototype (#eq? @_prototype "prototype"))
    .
    (string (string_fragment) @name)
    .
    [(function_expression) (arrow_function)]
    .)
  (#match? @name "^[A-Za-z_$][A-Za-z0-9_$]*$")) @definition.function
(call_expression
  arguments: (arguments
    .
    [(identifier) (member_expression) (this)] @parent
    .
    (string (string_fragment) @name)
    .
    [(function_expression) (arrow_function)]
    .)
  (#match? @name "^[A-Za-z_$][A-Za-z0-9_$]*$")) @definition.function
; any other function that carries its own name: new Promise(function dispatch(resolve) {...})
(function_expression name: (identifier) @name) @definition.function
(generator_function name: (identifier) @name) @definition.function

; Re-exports (@export, no span of their own): `export { A, B as C } from "./x"` publishes A and C.
(export_statement (export_clause (export_specifier name: (_) @export !alias)))
(export_statement (export_clause (export_specifier alias: (_) @export)))

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc
(decorator) @doc

; Statement lists: an oversized unit may be cut between their children.
[(statement_block) (class_body) (switch_body) (interface_body) (enum_body)] @block
