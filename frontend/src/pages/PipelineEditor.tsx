import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useMemo, useRef, useState, type ComponentType } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { stringify } from "yaml";
import { api, ok } from "../api/client";
import { ApiError } from "../api/errors";
import { invalidatePipeline, keys, usePipeline } from "../api/queries";
import type { PipelineState } from "../api/types";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorNote } from "../components/ErrorNote";
import type { SpecEditorHandle, SpecEditorProps } from "../components/SpecEditor";
import { StateBadge } from "../components/StateBadge";
import { useDebounced } from "../lib/hooks";
import { composeProblems, lineRange, mapFieldErrors, parseSpec, type SpecProblem } from "../lib/spec";
import { showToast } from "../lib/toast";
import { TEMPLATES } from "../templates";

type Mode = "create" | "edit";

/** How long typing must pause before the schema check runs. */
const CHECK_DELAY_MS = 300;
/** How long typing must pause before the server is asked (when the browser found nothing). */
const SERVER_CHECK_DELAY_MS = 800;

type SchemaCheck = (text: string) => SpecProblem[];

/** The browser-side schema check (ajv and the schema: a chunk of its own, loaded with the
 * editor); null until loaded, or if loading failed (the server still validates). */
function useSchemaCheck(): SchemaCheck | null {
  const [check, setCheck] = useState<SchemaCheck | null>(null);
  useEffect(() => {
    let live = true;
    import("../lib/specSchema").then(
      (m) => live && setCheck(() => m.schemaProblems),
      () => undefined,
    );
    return () => {
      live = false;
    };
  }, []);
  return check;
}

/** The CodeMirror editor (a chunk of its own with CodeMirror, loaded with the page):
 * "loading", the component, or "failed" (a plain textarea stands in). */
function useSpecEditor(): ComponentType<SpecEditorProps> | "loading" | "failed" {
  const [editor, setEditor] = useState<ComponentType<SpecEditorProps> | "loading" | "failed">("loading");
  useEffect(() => {
    let live = true;
    import("../components/SpecEditor").then(
      (m) => live && setEditor(() => m.SpecEditor),
      () => live && setEditor("failed"),
    );
    return () => {
      live = false;
    };
  }, []);
  return editor;
}

/** Create (`/pipelines/new`) or replace (`/pipelines/:name/edit`) a pipeline's spec. */
export function PipelineEditor({ mode }: { mode: Mode }) {
  const { name = "" } = useParams();
  if (mode === "edit") return <EditLoader name={name} />;
  return <Editor mode="create" initialText={TEMPLATES[0]?.text ?? ""} initialDescription="" />;
}

function EditLoader({ name }: { name: string }) {
  const p = usePipeline(name);
  const [loaded, setLoaded] = useState<{ text: string; description: string } | null>(null);
  // Take the spec once: the 2 s poll must not overwrite what is being edited.
  useEffect(() => {
    if (p.data && loaded === null) setLoaded({ text: stringify(p.data.spec), description: p.data.description });
  }, [p.data, loaded]);
  if (p.error) return <ErrorNote error={p.error} />;
  if (!loaded || !p.data) return <p className="muted">Loading…</p>;
  return (
    <Editor
      mode="edit"
      name={name}
      state={p.data.state}
      initialText={loaded.text}
      initialDescription={loaded.description}
    />
  );
}

interface EditorProps {
  mode: Mode;
  name?: string;
  state?: PipelineState;
  initialText: string;
  initialDescription: string;
}

function Editor({ mode, name, state, initialText, initialDescription }: EditorProps) {
  const qc = useQueryClient();
  const navigate = useNavigate();
  const ids = { editor: useId(), label: useId(), desc: useId(), template: useId(), problems: useId() };
  const SpecEditor = useSpecEditor();
  const editor = useRef<SpecEditorHandle>(null);
  const textarea = useRef<HTMLTextAreaElement>(null);
  const [text, setText] = useState(initialText);
  const [description, setDescription] = useState(initialDescription);
  const [templateId, setTemplateId] = useState(TEMPLATES[0]?.id ?? "");
  const [dirty, setDirty] = useState(false);
  const [confirmTemplate, setConfirmTemplate] = useState(false);
  // What the server said about the text last sent, and which text that was.
  const [server, setServer] = useState<{ problems: SpecProblem[]; valid: string | null; text: string } | null>(null);

  const parsed = useMemo(() => parseSpec(text), [text]);
  const syntax = useMemo(() => (parsed.ok ? [] : parsed.problems.map((p) => ({ ...p, source: "syntax" as const }))), [parsed]);
  // The schema check runs on the text once typing pauses; the server stays authoritative.
  const schemaCheck = useSchemaCheck();
  const settledText = useDebounced(text, CHECK_DELAY_MS);
  const schema = useMemo(() => (schemaCheck ? schemaCheck(settledText) : []), [schemaCheck, settledText]);
  // The text once typing has paused long enough to ask the server about it.
  const serverText = useDebounced(text, SERVER_CHECK_DELAY_MS);
  // The last text the live check sent (each text is sent once, even if the request failed).
  const autoSent = useRef<string | null>(null);

  function serverProblems(err: unknown, sent: string): SpecProblem[] | null {
    if (!(err instanceof ApiError)) return null;
    if (err.status !== 422 && err.status !== 409) return null;
    if (err.errors.length === 0) return [{ field: "(spec)", message: err.message, source: "server" }];
    return mapFieldErrors(err.errors, sent).map((p) => ({ ...p, source: "server" as const }));
  }

  const validate = useMutation({
    meta: { inlineErrors: true },
    mutationFn: (spec: Record<string, unknown>) =>
      ok(api.POST("/api/v1/pipelines/validate", { body: { spec, description } })),
  });

  const save = useMutation({
    meta: { inlineErrors: true },
    mutationFn: async (spec: Record<string, unknown>) => {
      // Validate first: nothing is created or replaced unless the spec passes.
      await ok(api.POST("/api/v1/pipelines/validate", { body: { spec, description } }));
      if (mode === "create") return ok(api.POST("/api/v1/pipelines", { body: { spec, description } }));
      return ok(api.PUT("/api/v1/pipelines/{name}", { params: { path: { name: name ?? "" } }, body: { spec, description } }));
    },
    onSuccess: async (p) => {
      showToast("success", mode === "create" ? `Created ${p.name}.` : `Saved ${p.name}.`);
      qc.setQueryData(keys.pipeline(p.name), p);
      await invalidatePipeline(qc, p.name);
      navigate(`/pipelines/${encodeURIComponent(p.name)}`);
    },
  });

  function runValidate() {
    if (!parsed.ok) return;
    const sent = text;
    validate.mutate(parsed.spec, {
      onSuccess: (v) => setServer({ problems: [], valid: v.name, text: sent }),
      onError: (err) => setServer({ problems: serverProblems(err, sent) ?? [], valid: null, text: sent }),
    });
  }

  function runSave() {
    if (!parsed.ok) return;
    const sent = text;
    setServer(null);
    save.mutate(parsed.spec, {
      onError: (err) => {
        const problems = serverProblems(err, sent);
        if (problems) setServer({ problems, valid: null, text: sent });
      },
    });
  }

  function applyTemplate() {
    const t = TEMPLATES.find((x) => x.id === templateId);
    if (!t) return;
    setText(t.text);
    setDirty(false);
    setServer(null);
    setConfirmTemplate(false);
  }

  // The live server check: once typing pauses, text that parses and passes the browser's
  // schema check goes to the server, so what only it finds (a misspelled column in the SQL)
  // shows without pressing Validate. One request at a time; an answer about an older text
  // is kept as stale (`server.text`), as for the button.
  const autoCheck =
    dirty &&
    parsed.ok &&
    schemaCheck !== null &&
    serverText === text &&
    settledText === text &&
    schema.length === 0 &&
    !validate.isPending &&
    !save.isPending &&
    server?.text !== text &&
    autoSent.current !== text;
  useEffect(() => {
    if (autoCheck) {
      autoSent.current = text;
      runValidate();
    }
    // runValidate reads this render's text and spec, the ones `autoCheck` was computed for.
  }, [autoCheck, text]);

  function goToLine(line: number | undefined) {
    if (line === undefined) return;
    if (editor.current) {
      editor.current.goToLine(line);
      return;
    }
    const ta = textarea.current;
    if (!ta) return;
    const [start, end] = lineRange(ta.value, line);
    ta.focus();
    ta.setSelectionRange(start, end);
    const lineHeight = parseFloat(getComputedStyle(ta).lineHeight) || 18;
    ta.scrollTop = Math.max(0, (line - 3) * lineHeight);
  }

  const stale = server !== null && server.text !== text;
  const problems = useMemo(() => composeProblems(text, syntax, schema, server), [text, syntax, schema, server]);
  const otherError =
    (validate.error && !serverProblems(validate.error, text) ? validate.error : null) ??
    (save.error && !serverProblems(save.error, text) ? save.error : null);
  const busy = validate.isPending || save.isPending;
  const replaceBlocked = mode === "edit" && state !== undefined && state !== "stopped" && state !== "failed";

  return (
    <section aria-labelledby="editor-title">
      <div className="page-head">
        <h1 id="editor-title">
          {mode === "create" ? (
            "New pipeline"
          ) : (
            <>
              Edit <Link to={`/pipelines/${encodeURIComponent(name ?? "")}`}>{name}</Link>
            </>
          )}
        </h1>
        {state && <StateBadge state={state} />}
      </div>
      {replaceBlocked && (
        <p className="note note-warn" role="status">
          This pipeline is {state}. The API replaces a spec only while the pipeline is stopped: stop it first.
        </p>
      )}

      <div className="editor-layout">
        <div className="editor-main">
          <div className="toolbar wrap">
            {mode === "create" && (
              <>
                <label htmlFor={ids.template}>Template</label>
                <select
                  id={ids.template}
                  value={templateId}
                  onChange={(e) => setTemplateId(e.target.value)}
                  data-testid="template-select"
                >
                  {(["datagen", "files", "log"] as const).map((kind) => (
                    <optgroup key={kind} label={`${kind} source`}>
                      {TEMPLATES.filter((t) => t.source === kind).map((t) => (
                        <option key={t.id} value={t.id}>
                          {t.label}
                        </option>
                      ))}
                    </optgroup>
                  ))}
                </select>
                <button
                  type="button"
                  className="btn btn-small"
                  onClick={() => (dirty ? setConfirmTemplate(true) : applyTemplate())}
                  data-testid="btn-use-template"
                >
                  Use template
                </button>
              </>
            )}
          </div>

          <label id={ids.label} htmlFor={ids.editor} className="block-label" onClick={() => editor.current?.focus()}>
            Spec (YAML or JSON)
          </label>
          <div className={`code-editor${syntax.length ? " has-error" : ""}`}>
            {SpecEditor === "loading" ? (
              <p className="code-editor-loading muted">Loading the editor…</p>
            ) : SpecEditor !== "failed" ? (
              <SpecEditor
                ref={editor}
                value={text}
                onChange={(t) => {
                  setText(t);
                  setDirty(true);
                }}
                problems={problems}
                id={ids.editor}
                labelledBy={ids.label}
                describedBy={ids.problems}
                invalid={problems.length > 0}
                testId="spec-editor"
              />
            ) : (
              <textarea
                id={ids.editor}
                ref={textarea}
                value={text}
                onChange={(e) => {
                  setText(e.target.value);
                  setDirty(true);
                }}
                spellCheck={false}
                autoCapitalize="off"
                autoCorrect="off"
                wrap="off"
                aria-describedby={ids.problems}
                aria-invalid={problems.length > 0 ? true : undefined}
                data-testid="spec-editor"
              />
            )}
          </div>

          <label htmlFor={ids.desc} className="block-label">
            Description <span className="muted">(optional)</span>
          </label>
          <input
            id={ids.desc}
            type="text"
            maxLength={2000}
            value={description}
            onChange={(e) => setDescription(e.target.value)}
            data-testid="description-input"
          />

          <div className="actions">
            <button type="button" className="btn" onClick={runValidate} disabled={!parsed.ok || busy} data-testid="btn-validate">
              {validate.isPending ? "Validating…" : "Validate"}
            </button>
            <button
              type="button"
              className="btn btn-primary"
              onClick={runSave}
              disabled={!parsed.ok || busy || replaceBlocked}
              data-testid={mode === "create" ? "btn-create" : "btn-save"}
            >
              {save.isPending ? "Saving…" : mode === "create" ? "Create pipeline" : "Save spec"}
            </button>
            <Link className="btn btn-link" to={mode === "create" ? "/pipelines" : `/pipelines/${encodeURIComponent(name ?? "")}`}>
              Cancel
            </Link>
          </div>
          <ErrorNote error={otherError} testId="editor-error" />
        </div>

        <aside className="editor-side" aria-labelledby={ids.problems}>
          <h2 id={ids.problems} className="h3">
            Problems
          </h2>
          {problems.length === 0 && server?.valid && !stale && (
            <p className="note note-ok" role="status" data-testid="spec-valid">
              Valid: pipeline “{server.valid}”.
            </p>
          )}
          {problems.length === 0 && !server?.valid && (
            <p className="muted small">
              Syntax and the spec's schema are checked as you type; once typing pauses and they find nothing, the
              server is asked (as “Validate” does), which also checks how the fields refer to each other and the SQL.
            </p>
          )}
          {stale && problems.some((p) => p.source === "server") && (
            <p className="muted small">The text changed since the last validation; validate again to refresh.</p>
          )}
          <ul className="problems" data-testid="spec-errors" aria-live="polite">
            {problems.map((p, i) => (
              <li
                key={`${p.field}-${i}`}
                className="problem"
                data-testid="spec-error"
                data-field={p.field}
                data-source={p.source}
                title={p.source === "schema" ? "Found by the schema check in the browser" : undefined}
              >
                <button type="button" className="problem-link" onClick={() => goToLine(p.line)} disabled={p.line === undefined}>
                  <code className="problem-field">{p.field}</code>
                  {p.line !== undefined && <span className="problem-line">line {p.line}</span>}
                </button>
                <span className="problem-message">{p.message}</span>
              </li>
            ))}
          </ul>
        </aside>
      </div>

      <ConfirmDialog
        open={confirmTemplate}
        title="Replace the spec with the template?"
        confirmLabel="Replace"
        onConfirm={applyTemplate}
        onCancel={() => setConfirmTemplate(false)}
      >
        <p>Your edits in the editor will be lost.</p>
      </ConfirmDialog>
    </section>
  );
}
