; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
; `impl Trait for Foo` is a container named Foo, so its methods get the parent Foo.
(function_item name: (identifier) @name) @definition.function
(function_signature_item name: (identifier) @name) @definition.function
(struct_item name: (type_identifier) @name) @definition.struct
(union_item name: (type_identifier) @name) @definition.struct
(enum_item name: (type_identifier) @name) @definition.enum
(trait_item name: (type_identifier) @name) @definition.trait
(mod_item name: (identifier) @name body: (declaration_list)) @definition.module
(macro_definition name: (identifier) @name) @definition.macro
(impl_item
  type: [
    (type_identifier) @name
    (generic_type type: (type_identifier) @name)
    (scoped_type_identifier name: (type_identifier) @name)
    (generic_type type: (scoped_type_identifier name: (type_identifier) @name))
  ]) @definition.impl
; an impl for a type without a plain name: `impl Trait for bool`, `for &'a str`, `for [T]`
(impl_item type: (_) @name) @definition.impl

; Re-exports (@export, no span of their own): `pub use a::{B, c::D, E as F}` publishes B, D and
; F here, which is where a name defined in another crate enters this one.
(use_declaration (visibility_modifier) argument: [
  (identifier) @export
  (scoped_identifier name: (identifier) @export)
  (use_as_clause alias: (identifier) @export)])
(use_declaration (visibility_modifier) argument: [
  (use_list [
    (identifier) @export
    (scoped_identifier name: (identifier) @export)
    (use_as_clause alias: (identifier) @export)
    (scoped_use_list list: (use_list (identifier) @export))])
  (scoped_use_list list: (use_list [
    (identifier) @export
    (scoped_identifier name: (identifier) @export)
    (use_as_clause alias: (identifier) @export)
    (scoped_use_list list: (use_list (identifier) @export))]))])

; Leading trivia: attached to the definition that follows without a blank line.
(line_comment) @doc
(block_comment) @doc
(attribute_item) @doc

; Statement lists: an oversized unit may be cut between their children.
[(block) (declaration_list) (field_declaration_list) (enum_variant_list) (match_block)] @block
