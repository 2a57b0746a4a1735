import { useEffect, useId, useMemo, useState, type FormEvent } from "react";
import { useCheckpoints, useView, useViewDiff } from "../../api/queries";
import { ErrorNote } from "../../components/ErrorNote";
import { shortId } from "../../lib/format";
import { usePipelineContext } from "../PipelineDetail";

const PAGE_SIZES = [25, 50, 100, 500] as const;

/** The `view` sinks of a spec: `sinks: [{name, kind: view, from}]`. */
export function viewSinks(spec: Record<string, unknown>): string[] {
  const sinks = spec.sinks;
  if (!Array.isArray(sinks)) return [];
  return sinks.flatMap((s: unknown) => {
    if (typeof s !== "object" || s === null) return [];
    const o = s as Record<string, unknown>;
    return o.kind === "view" && typeof o.name === "string" ? [o.name] : [];
  });
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "object") return JSON.stringify(v);
  // Doubles: 12 significant digits hide binary noise (20505.180000000004 -> 20505.18).
  if (typeof v === "number" && !Number.isInteger(v)) return String(Number(v.toPrecision(12)));
  return String(v);
}

/** Every column of `rows`, in the order they first appear. */
function columnsOf(rows: readonly Record<string, unknown>[]): string[] {
  const cols: string[] = [];
  for (const r of rows) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
  return cols;
}

function Head({ columns }: { columns: readonly string[] }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th key={c} scope="col">
            {c}
          </th>
        ))}
      </tr>
    </thead>
  );
}

export function Views() {
  const { pipeline } = usePipelineContext();
  const views = useMemo(() => viewSinks(pipeline.spec), [pipeline.spec]);
  const [view, setView] = useState<string | null>(views[0] ?? null);
  const [offset, setOffset] = useState(0);
  const [limit, setLimit] = useState<number>(PAGE_SIZES[0]);
  const [keyInputs, setKeyInputs] = useState<string[]>([""]);
  const [key, setKey] = useState<string[]>([]);
  // Time travel: "" (now: the running pipeline's newest step, else the newest
  // checkpoint), "latest" (the newest checkpoint) or a checkpoint's uuid; and one to
  // compare it with.
  const [asOf, setAsOf] = useState("");
  const [since, setSince] = useState<string | null>(null);
  const ids = { view: useId(), size: useId(), key: useId(), asOf: useId(), since: useId() };
  const page = useView(pipeline.name, view, offset, limit, key, asOf);
  const diff = useViewDiff(pipeline.name, view, since, asOf || "latest", 1000);
  const checkpoints = useCheckpoints(pipeline.name);
  const retained = [...(checkpoints.data ?? [])].sort((a, b) => b.step - a.step);

  useEffect(() => {
    if (view === null || !views.includes(view)) setView(views[0] ?? null);
  }, [views, view]);

  const rows = page.data?.rows ?? [];
  const columns = useMemo(() => columnsOf(rows), [rows]);
  const [knownColumns, setKnownColumns] = useState<string[]>([]);
  useEffect(() => {
    if (columns.length) setKnownColumns(columns);
  }, [columns]);

  if (views.length === 0) {
    return (
      <p className="note" data-testid="no-views">
        This pipeline's spec has no <code>view</code> sink. Add one (<code>{"{name: latest, kind: view, from: <state>}"}</code>) to read
        its rows here.
      </p>
    );
  }

  function lookup(e: FormEvent) {
    e.preventDefault();
    // The leading columns, in order: stop at the first empty one.
    const values: string[] = [];
    for (const v of keyInputs) {
      if (v.trim() === "") break;
      values.push(v.trim());
    }
    setKey(values);
    setOffset(0);
  }

  const byKey = key.length > 0;
  return (
    <div className="views">
      <div className="toolbar wrap">
        <label htmlFor={ids.view}>View</label>
        <select
          id={ids.view}
          value={view ?? ""}
          onChange={(e) => {
            setView(e.target.value);
            setOffset(0);
            setKey([]);
            setKeyInputs([""]);
            setKnownColumns([]);
          }}
          data-testid="view-select"
        >
          {views.map((v) => (
            <option key={v} value={v}>
              {v}
            </option>
          ))}
        </select>
        <label htmlFor={ids.size}>Rows per page</label>
        <select
          id={ids.size}
          value={limit}
          onChange={(e) => {
            setLimit(Number(e.target.value));
            setOffset(0);
          }}
          data-testid="view-limit"
        >
          {PAGE_SIZES.map((n) => (
            <option key={n} value={n}>
              {n}
            </option>
          ))}
        </select>
        <label htmlFor={ids.asOf}>As of</label>
        <select
          id={ids.asOf}
          value={asOf}
          onChange={(e) => {
            setAsOf(e.target.value);
            setOffset(0);
          }}
          data-testid="view-as-of"
        >
          <option value="">now</option>
          <option value="latest">the newest checkpoint</option>
          {retained.map((c) => (
            <option key={c.uuid} value={c.uuid}>
              step {c.step} · {shortId(c.uuid)}
            </option>
          ))}
        </select>
        <label htmlFor={ids.since}>Changes since</label>
        <select
          id={ids.since}
          value={since ?? ""}
          onChange={(e) => setSince(e.target.value === "" ? null : e.target.value)}
          data-testid="view-since"
        >
          <option value="">(show the rows)</option>
          {retained.map((c) => (
            <option key={c.uuid} value={c.uuid}>
              step {c.step} · {shortId(c.uuid)}
            </option>
          ))}
        </select>
      </div>

      <form className="key-lookup" onSubmit={lookup} aria-labelledby={ids.key}>
        <span id={ids.key} className="block-label">
          Look up by key <span className="muted">(values of the leading columns, in order)</span>
        </span>
        <div className="toolbar wrap">
          {keyInputs.map((v, i) => {
            const col = knownColumns[i];
            return (
              <label key={i} className="key-input">
                <span className="small muted">{col ?? `column ${i + 1}`}</span>
                <input
                  value={v}
                  onChange={(e) => setKeyInputs(keyInputs.map((x, j) => (j === i ? e.target.value : x)))}
                  aria-label={`Key value ${i + 1}${col ? ` (${col})` : ""}`}
                  data-testid={`view-key-${i}`}
                />
              </label>
            );
          })}
          <button
            type="button"
            className="btn btn-small"
            onClick={() => setKeyInputs([...keyInputs, ""])}
            disabled={knownColumns.length > 0 && keyInputs.length >= knownColumns.length}
            aria-label="Add a key column"
          >
            + column
          </button>
          <button type="submit" className="btn btn-primary btn-small" data-testid="btn-view-lookup">
            Look up
          </button>
          {byKey && (
            <button
              type="button"
              className="btn btn-small"
              onClick={() => {
                setKey([]);
                setKeyInputs([""]);
              }}
              data-testid="btn-view-clear"
            >
              Show all
            </button>
          )}
        </div>
      </form>

      <ErrorNote error={page.error} testId="view-error" />
      <div className="view-meta muted small" data-testid="view-meta">
        {page.data &&
          (page.data.live
            ? `Live: the running pipeline's step ${page.data.step ?? "?"}`
            : page.data.checkpoint
              ? `As of checkpoint ${shortId(page.data.checkpoint)} (step ${page.data.step ?? "?"})`
              : "No checkpoint yet: the view is empty until the pipeline commits one.")}
        {byKey && ` · key = ${key.map((k) => JSON.stringify(k)).join(", ")}`}
      </div>

      {since !== null ? (
        <DiffTable diff={diff} />
      ) : (
        <div className="table-wrap">
          <table className="table" data-testid="view-table">
            <Head columns={columns} />
            <tbody>
              {rows.map((r, i) => (
                <tr key={i} data-testid={`view-row-${i}`}>
                  {columns.map((c) => (
                    <td key={c} className={typeof r[c] === "number" ? "num" : undefined}>
                      {cell(r[c])}
                    </td>
                  ))}
                </tr>
              ))}
              {rows.length === 0 && page.data && (
                <tr>
                  <td className="muted">{byKey ? "No row has this key." : "No rows."}</td>
                </tr>
              )}
            </tbody>
          </table>
        </div>
      )}

      {!byKey && since === null && (
        <div className="pager">
          <button
            type="button"
            className="btn btn-small"
            onClick={() => setOffset(Math.max(0, offset - limit))}
            disabled={offset === 0 || page.isFetching}
            data-testid="btn-view-prev"
          >
            ← Previous
          </button>
          <span className="small" data-testid="view-range">
            {rows.length ? `rows ${offset + 1}–${offset + rows.length}` : `offset ${offset}`}
          </span>
          <button
            type="button"
            className="btn btn-small"
            onClick={() => setOffset(offset + limit)}
            disabled={rows.length < limit || page.isFetching}
            data-testid="btn-view-next"
          >
            Next →
          </button>
        </div>
      )}
    </div>
  );
}

/** A view's changes between two checkpoints: each row whose count differs, with its weight. */
function DiffTable({ diff }: { diff: ReturnType<typeof useViewDiff> }) {
  const rows = diff.data?.rows ?? [];
  const columns = columnsOf(rows);
  return (
    <div className="table-wrap">
      <ErrorNote error={diff.error} testId="view-diff-error" />
      {diff.data && (
        <div className="view-meta muted small" data-testid="view-diff-meta">
          {`Step ${diff.data.from.step} → step ${diff.data.to.step}: +n rows came, -n went`}
        </div>
      )}
      <table className="table" data-testid="view-diff-table">
        <Head columns={columns} />
        <tbody>
          {rows.map((r, i) => (
            <tr
              key={i}
              data-testid={`view-diff-row-${i}`}
              className={Number(r.weight) < 0 ? "muted" : undefined}
            >
              {columns.map((c) => (
                <td key={c} className={typeof r[c] === "number" ? "num" : undefined}>
                  {c === "weight" && Number(r[c]) > 0 ? `+${cell(r[c])}` : cell(r[c])}
                </td>
              ))}
            </tr>
          ))}
          {rows.length === 0 && diff.data && (
            <tr>
              <td className="muted">No change between the two checkpoints.</td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}
