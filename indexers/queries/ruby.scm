; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; `class Foo::Bar` keeps its qualified name: the symbol is Foo.Bar.
(module name: [(constant) (scope_resolution)] @name) @definition.module
(class name: [(constant) (scope_resolution)] @name) @definition.class
(singleton_class value: (_) @name) @definition.class
(method name: (_) @name) @definition.method
(singleton_method name: (_) @name) @definition.method
; A block given to a call whose first argument is a symbol defines what the symbol names:
; define_method(:fresh) do ... end, let(:user) { ... }, task :build do ... end
(call
  !receiver
  arguments: (argument_list . (simple_symbol) @name)
  block: [(do_block) (block)]) @definition.method
; Point = Struct.new(:x, :y) do ... end, Handler = Class.new(Base) { ... }
(assignment
  left: [(constant) (scope_resolution)] @name
  right: (call
    receiver: [(constant) (scope_resolution)]
    method: (identifier) @_new (#eq? @_new "new")
    block: [(do_block) (block)])) @definition.class
; HANDLER = ->(x) { ... }, handler = lambda { |x| ... }
(assignment
  left: [(constant) (identifier) (scope_resolution)] @name
  right: (lambda)) @definition.function

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(body_statement) (then) (else) (do) (do_block) (block_body) (begin) (ensure) (rescue)
 (when)] @block
