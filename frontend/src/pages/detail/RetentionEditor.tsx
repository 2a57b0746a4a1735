import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useState, type FormEvent } from "react";
import { api, ok } from "../../api/client";
import { ApiError } from "../../api/errors";
import { keys, useRetention } from "../../api/queries";
import type { Retention, RetentionIn } from "../../api/types";
import { ErrorNote } from "../../components/ErrorNote";
import { showToast } from "../../lib/toast";

type Field = keyof RetentionIn;
type Form = Record<Field, string>;

const FIELDS: { key: Field; label: string; help: string; integer: boolean; optional: boolean; min: number; exclusive: boolean }[] = [
  { key: "keep_last", label: "Keep last", help: "checkpoints kept; empty: no limit", integer: true, optional: true, min: 1, exclusive: false },
  { key: "max_age_s", label: "Max age (s)", help: "older checkpoints are deleted; empty: no limit", integer: false, optional: true, min: 0, exclusive: true },
  { key: "min_keep", label: "Min keep", help: "never fewer than this many", integer: true, optional: false, min: 0, exclusive: false },
  {
    key: "auto_commit_interval_s",
    label: "Auto-commit every (s)",
    help: "a checkpoint this often while running; empty: off",
    integer: false,
    optional: true,
    min: 0,
    exclusive: true,
  },
];

function toForm(r: Retention): Form {
  const s = (v: number | null | undefined) => (v === null || v === undefined ? "" : String(v));
  return { keep_last: s(r.keep_last), max_age_s: s(r.max_age_s), min_keep: s(r.min_keep), auto_commit_interval_s: s(r.auto_commit_interval_s) };
}

/** The form's values as the API's body, or the fields that are wrong. */
export function parseRetention(form: Form): { body: RetentionIn } | { errors: Partial<Record<Field, string>> } {
  const errors: Partial<Record<Field, string>> = {};
  const out: Record<string, number | null> = {};
  for (const f of FIELDS) {
    const raw = form[f.key].trim();
    if (raw === "") {
      if (!f.optional) errors[f.key] = "required";
      out[f.key] = null;
      continue;
    }
    const n = Number(raw);
    if (!Number.isFinite(n)) errors[f.key] = "not a number";
    else if (f.integer && !Number.isInteger(n)) errors[f.key] = "must be a whole number";
    else if (f.exclusive ? n <= f.min : n < f.min) errors[f.key] = `must be ${f.exclusive ? "greater than" : "at least"} ${f.min}`;
    out[f.key] = n;
  }
  if (Object.keys(errors).length) return { errors };
  return {
    body: {
      keep_last: out.keep_last ?? null,
      max_age_s: out.max_age_s ?? null,
      min_keep: out.min_keep ?? 1,
      auto_commit_interval_s: out.auto_commit_interval_s ?? null,
    },
  };
}

export function RetentionEditor({ name }: { name: string }) {
  const qc = useQueryClient();
  const retention = useRetention(name);
  const [form, setForm] = useState<Form | null>(null);
  const [fieldErrors, setFieldErrors] = useState<Partial<Record<Field, string>>>({});
  const baseId = useId();

  useEffect(() => {
    if (retention.data && form === null) setForm(toForm(retention.data));
  }, [retention.data, form]);

  const save = useMutation({
    meta: { inlineErrors: true },
    mutationFn: (body: RetentionIn) => ok(api.PUT("/api/v1/pipelines/{name}/retention", { params: { path: { name } }, body })),
    onSuccess: (r) => {
      qc.setQueryData(keys.retention(name), r);
      setForm(toForm(r));
      showToast("success", "Retention policy saved.");
    },
    onError: (err) => {
      if (err instanceof ApiError) {
        const fe: Partial<Record<Field, string>> = {};
        for (const e of err.errors) {
          const f = FIELDS.find((x) => e.field === x.key || e.field.endsWith(`.${x.key}`));
          if (f) fe[f.key] = e.message;
        }
        setFieldErrors(fe);
      }
    },
  });

  function submit(e: FormEvent) {
    e.preventDefault();
    if (!form) return;
    const parsed = parseRetention(form);
    if ("errors" in parsed) {
      setFieldErrors(parsed.errors);
      return;
    }
    setFieldErrors({});
    save.mutate(parsed.body);
  }

  return (
    <section className="card retention" aria-labelledby={`${baseId}-title`}>
      <h3 id={`${baseId}-title`} className="h4">
        Retention policy
      </h3>
      <ErrorNote error={retention.error} />
      {form && (
        <form onSubmit={submit} noValidate data-testid="retention-form">
          <div className="form-grid">
            {FIELDS.map((f) => {
              const id = `${baseId}-${f.key}`;
              const err = fieldErrors[f.key];
              return (
                <div key={f.key} className="field">
                  <label htmlFor={id}>{f.label}</label>
                  <input
                    id={id}
                    type="number"
                    inputMode={f.integer ? "numeric" : "decimal"}
                    step={f.integer ? 1 : "any"}
                    min={f.min}
                    value={form[f.key]}
                    required={!f.optional}
                    aria-invalid={err ? true : undefined}
                    aria-describedby={`${id}-help`}
                    onChange={(e) => setForm({ ...form, [f.key]: e.target.value })}
                    data-testid={`retention-${f.key}`}
                  />
                  <span id={`${id}-help`} className={err ? "error-text small" : "help"}>
                    {err ?? f.help}
                  </span>
                </div>
              );
            })}
          </div>
          <ErrorNote error={save.error} testId="retention-error" />
          <div className="actions">
            <button type="submit" className="btn btn-primary" disabled={save.isPending} data-testid="btn-save-retention">
              {save.isPending ? "Saving…" : "Save policy"}
            </button>
            <button
              type="button"
              className="btn btn-link"
              onClick={() => {
                if (retention.data) setForm(toForm(retention.data));
                setFieldErrors({});
                save.reset();
              }}
            >
              Reset
            </button>
          </div>
        </form>
      )}
    </section>
  );
}
