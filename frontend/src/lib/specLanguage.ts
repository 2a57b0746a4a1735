// The spec editor's language: YAML (JSON is YAML), with the value of the top-level `sql`
// key parsed as SQL (a nested parse: a block scalar's content, or a plain or quoted
// one-line value), the classes the highlighting gives to tokens (styled in styles.css),
// and the editor's marks for the problems found in the text.
import { LanguageSupport, syntaxHighlighting } from "@codemirror/language";
import { yamlLanguage } from "@codemirror/lang-yaml";
import { SQLDialect } from "@codemirror/lang-sql";
import { parseMixed, type Input, type SyntaxNode, type SyntaxNodeRef } from "@lezer/common";
import { tagHighlighter, tags as t } from "@lezer/highlight";
import type { Diagnostic } from "@codemirror/lint";
import type { Extension, Text } from "@codemirror/state";
import type { SpecProblem } from "./spec";

/** Spark SQL, as far as highlighting goes: the standard keywords, `backquoted` names. */
export const sparkSql = SQLDialect.define({ identifierQuotes: "`" });

/** The text of a `Key` node, unquoted. */
function keyName(key: SyntaxNode, input: Input): string {
  return input.read(key.from, key.to).replace(/^(["'])(.*)\1$/, "$2");
}

/** Whether `value` (a node in value position) is the value of the top-level `sql` key. */
function isSqlValue(value: SyntaxNode, input: Input): boolean {
  const pair = value.parent;
  if (!pair || pair.name !== "Pair") return false;
  const mapping = pair.parent;
  if (!mapping || (mapping.name !== "BlockMapping" && mapping.name !== "FlowMapping")) return false;
  if (mapping.parent?.name !== "Document") return false;
  const key = pair.getChild("Key");
  return key !== null && key.to <= value.from && keyName(key, input) === "sql";
}

function nestSql(ref: SyntaxNodeRef, input: Input) {
  const node = ref.node;
  if (node.name === "BlockLiteralContent") {
    const block = node.parent;
    return block && block.name === "BlockLiteral" && isSqlValue(block, input) ? { parser: sparkSql.language.parser } : null;
  }
  if ((node.name === "Literal" || node.name === "QuotedLiteral") && isSqlValue(node, input)) {
    if (node.name === "Literal") return { parser: sparkSql.language.parser };
    if (node.to - node.from < 2) return null;
    return { parser: sparkSql.language.parser, overlay: [{ from: node.from + 1, to: node.to - 1 }] };
  }
  return null;
}

/** YAML with the `sql` value parsed as SQL. */
export const specLanguage = yamlLanguage.configure({ wrap: parseMixed(nestSql) }, "spec-yaml");

/** Token classes (`tok-*`, styled in styles.css) for YAML and the nested SQL. */
export const specHighlighter = tagHighlighter([
  { tag: t.definition(t.propertyName), class: "tok-key" },
  { tag: [t.keyword, t.operatorKeyword, t.modifier, t.controlKeyword], class: "tok-keyword" },
  { tag: [t.string, t.special(t.string), t.attributeValue], class: "tok-string" },
  { tag: [t.number, t.bool, t.null, t.atom], class: "tok-number" },
  { tag: [t.comment, t.lineComment, t.blockComment], class: "tok-comment" },
  { tag: [t.typeName, t.standard(t.name), t.special(t.name)], class: "tok-type" },
  { tag: [t.meta, t.labelName, t.processingInstruction], class: "tok-meta" },
  { tag: t.operator, class: "tok-operator" },
  { tag: [t.punctuation, t.separator, t.bracket], class: "tok-punct" },
  { tag: t.special(t.variableName), class: "tok-special" },
  { tag: t.invalid, class: "tok-invalid" },
]);

/** The language and its highlighting. */
export function specLanguageSupport(): Extension {
  return [new LanguageSupport(specLanguage), syntaxHighlighting(specHighlighter)];
}

/** A word at a problem's column: an identifier (`c.auctoin`, `group_by`), else what is not space. */
const TOKEN = /^[\p{L}\p{N}_$.-]+|^\S+/u;

/** The problems as CodeMirror diagnostics on `doc`: from the column to the end of the
 * token there, or the whole line without a column. */
export function toDiagnostics(doc: Text, problems: readonly SpecProblem[]): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const p of problems) {
    if (p.line === undefined) continue;
    const line = doc.line(Math.min(Math.max(1, p.line), doc.lines));
    let from = line.from;
    let to = line.to;
    if (p.col !== undefined) {
      const start = Math.min(line.from + Math.max(0, p.col - 1), line.to);
      const token = TOKEN.exec(doc.sliceString(start, line.to))?.[0];
      if (token) {
        from = start;
        to = start + token.length;
      }
    }
    out.push({
      from,
      to,
      severity: "error",
      message: `${p.field}: ${p.message}`,
      ...(p.source ? { source: p.source } : {}),
    });
  }
  return out;
}
