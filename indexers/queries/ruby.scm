; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; `class Foo::Bar` keeps its qualified name: the symbol is Foo.Bar.
(module name: [(constant) (scope_resolution)] @name) @definition.module
(class name: [(constant) (scope_resolution)] @name) @definition.class
(singleton_class value: (_) @name) @definition.class
(method name: (_) @name) @definition.method
(singleton_method name: (_) @name) @definition.method

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(body_statement) (then) (else) (do) (do_block) (block_body) (begin) (ensure) (rescue)
 (when)] @block
