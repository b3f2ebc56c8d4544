; Definitions: @definition.<kind> marks the node that becomes a span, @name its name.
(function_definition name: (word) @name) @definition.function

; Leading trivia: attached to the definition that follows without a blank line.
(comment) @doc

; Statement lists: an oversized unit may be cut between their children.
[(compound_statement) (do_group) (if_statement) (elif_clause) (else_clause) (case_statement)
 (case_item) (subshell)] @block
