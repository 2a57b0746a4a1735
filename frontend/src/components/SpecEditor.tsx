// The spec editor: CodeMirror 6 with line numbers, YAML highlighting (the `sql` value
// highlighted as SQL), undo/redo, and each problem with a line marked inline (@codemirror/
// lint: an underline and a gutter marker). Loaded on demand (PipelineEditor imports it
// dynamically), so CodeMirror stays out of the main bundle.
import { defaultKeymap, history, historyKeymap, indentLess, indentMore } from "@codemirror/commands";
import { bracketMatching, indentOnInput, indentUnit } from "@codemirror/language";
import { lintGutter, lintKeymap, setDiagnostics } from "@codemirror/lint";
import { Annotation, Compartment, EditorSelection, EditorState } from "@codemirror/state";
import {
  drawSelection,
  EditorView,
  highlightActiveLine,
  highlightActiveLineGutter,
  highlightSpecialChars,
  keymap,
  lineNumbers,
  type Command,
} from "@codemirror/view";
import { useEffect, useImperativeHandle, useRef, type Ref } from "react";
import type { SpecProblem } from "../lib/spec";
import { specLanguageSupport, toDiagnostics } from "../lib/specLanguage";

export interface SpecEditorHandle {
  /** Select 1-based `line`, scroll it into view and focus the editor. */
  goToLine(line: number): void;
  focus(): void;
}

export interface SpecEditorProps {
  /** The text. The editor reports edits with `onChange`; a different value set by the
   * parent (a template, the loaded spec) replaces the document. */
  value: string;
  onChange: (text: string) => void;
  /** Marked in the text: those with a line. */
  problems: readonly SpecProblem[];
  /** Attributes of the editable element. */
  id: string;
  labelledBy: string;
  describedBy: string;
  invalid: boolean;
  testId?: string;
  ref?: Ref<SpecEditorHandle>;
}

const INDENT = "  ";

/** Marks the transactions that put the parent's text in (not reported back as edits). */
const fromParent = Annotation.define<boolean>();

/** Tab: spaces to the next indentation stop (YAML has no tabs), or indent the selected lines. */
const insertSpaces: Command = (view) => {
  const { state } = view;
  if (state.readOnly) return false;
  if (state.selection.ranges.some((r) => !r.empty)) return indentMore(view);
  const unit = state.facet(indentUnit).length || INDENT.length;
  view.dispatch(
    state.update(
      state.changeByRange((range) => {
        const column = range.head - state.doc.lineAt(range.head).from;
        const insert = " ".repeat(unit - (column % unit));
        return { changes: { from: range.head, insert }, range: EditorSelection.cursor(range.head + insert.length) };
      }),
      { scrollIntoView: true, userEvent: "input" },
    ),
  );
  return true;
};

function contentAttributes(p: Pick<SpecEditorProps, "id" | "labelledBy" | "describedBy" | "invalid" | "testId">) {
  return EditorView.contentAttributes.of({
    id: p.id,
    "aria-labelledby": p.labelledBy,
    "aria-describedby": p.describedBy,
    ...(p.invalid ? { "aria-invalid": "true" } : {}),
    ...(p.testId ? { "data-testid": p.testId } : {}),
  });
}

const darkQuery = typeof window !== "undefined" && window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

export function SpecEditor({ value, onChange, problems, id, labelledBy, describedBy, invalid, testId, ref }: SpecEditorProps) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  // The last text reported to the parent: a `value` equal to it is the editor's own.
  const emitted = useRef(value);
  const onChangeRef = useRef(onChange);
  useEffect(() => {
    onChangeRef.current = onChange;
  }, [onChange]);
  const attrs = useRef(new Compartment());
  const dark = useRef(new Compartment());

  useEffect(() => {
    if (!host.current) return;
    const v = new EditorView({
      parent: host.current,
      state: EditorState.create({
        doc: emitted.current,
        extensions: [
          lineNumbers(),
          lintGutter(),
          highlightActiveLineGutter(),
          highlightSpecialChars(),
          history(),
          drawSelection(),
          indentOnInput(),
          bracketMatching(),
          highlightActiveLine(),
          indentUnit.of(INDENT),
          EditorState.tabSize.of(2),
          specLanguageSupport(),
          keymap.of([{ key: "Tab", run: insertSpaces, shift: indentLess }, ...defaultKeymap, ...historyKeymap, ...lintKeymap]),
          // Set from the first props here (tests find the element by them at once), and
          // kept up to date by the effect below.
          attrs.current.of(contentAttributes({ id, labelledBy, describedBy, invalid, testId })),
          dark.current.of(EditorView.darkTheme.of(darkQuery?.matches ?? false)),
          EditorView.updateListener.of((u) => {
            if (!u.docChanged) return;
            const text = u.state.doc.toString();
            emitted.current = text;
            if (!u.transactions.some((tr) => tr.annotation(fromParent))) onChangeRef.current(text);
          }),
        ],
      }),
    });
    view.current = v;
    const onScheme = (e: MediaQueryListEvent) => v.dispatch({ effects: dark.current.reconfigure(EditorView.darkTheme.of(e.matches)) });
    darkQuery?.addEventListener("change", onScheme);
    return () => {
      darkQuery?.removeEventListener("change", onScheme);
      v.destroy();
      view.current = null;
    };
    // Created once: later props reach the view through the effects below.
  }, []);

  useEffect(() => {
    view.current?.dispatch({ effects: attrs.current.reconfigure(contentAttributes({ id, labelledBy, describedBy, invalid, testId })) });
  }, [id, labelledBy, describedBy, invalid, testId]);

  // A new text from the parent replaces the document (one undoable change), then the
  // problems (found on that text) are marked.
  useEffect(() => {
    const v = view.current;
    if (!v) return;
    if (value !== emitted.current && value !== v.state.doc.toString()) {
      emitted.current = value;
      v.dispatch({
        changes: { from: 0, to: v.state.doc.length, insert: value },
        selection: EditorSelection.cursor(0),
        annotations: fromParent.of(true),
      });
    }
    v.dispatch(setDiagnostics(v.state, toDiagnostics(v.state.doc, problems)));
  }, [value, problems]);

  useImperativeHandle(
    ref,
    () => ({
      goToLine(line: number) {
        const v = view.current;
        if (!v) return;
        const l = v.state.doc.line(Math.min(Math.max(1, line), v.state.doc.lines));
        v.dispatch({
          selection: EditorSelection.range(l.from, l.to),
          effects: EditorView.scrollIntoView(l.from, { y: "center" }),
        });
        v.focus();
      },
      focus() {
        view.current?.focus();
      },
    }),
    [],
  );

  return <div className="code-editor-host" ref={host} />;
}
