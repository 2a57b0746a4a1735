import { useId, useLayoutEffect, useMemo, useRef, useState } from "react";
import { useLogs, useRuns } from "../../api/queries";
import { ErrorNote } from "../../components/ErrorNote";
import { usePipelineContext } from "../PipelineDetail";

const LINES = 300;

/** The driver log's tail, polled every 2 s; follows the end unless turned off. */
export function Logs() {
  const { pipeline } = usePipelineContext();
  const runs = useRuns(pipeline.name);
  const [run, setRun] = useState<number | null>(null);
  const [follow, setFollow] = useState(true);
  const logs = useLogs(pipeline.name, run, LINES);
  const box = useRef<HTMLPreElement>(null);
  const ids = { run: useId(), follow: useId() };
  // Spark's progress bars end lines with \r, which the API splits into blank lines: show
  // one blank line where there are several.
  const lines = useMemo(
    () => logs.data?.lines.filter((l, i, all) => l.trim() !== "" || i === 0 || (all[i - 1] ?? "").trim() !== ""),
    [logs.data],
  );

  useLayoutEffect(() => {
    const el = box.current;
    if (el && follow) el.scrollTop = el.scrollHeight;
  }, [lines, follow]);

  return (
    <div className="logs">
      <div className="toolbar wrap">
        <label htmlFor={ids.run}>Run</label>
        <select
          id={ids.run}
          value={run === null ? "" : String(run)}
          onChange={(e) => setRun(e.target.value === "" ? null : Number(e.target.value))}
          data-testid="log-run-select"
        >
          <option value="">latest</option>
          {(runs.data ?? []).map((r) => (
            <option key={r.id} value={r.number}>
              #{r.number} ({r.state})
            </option>
          ))}
        </select>
        <label className="checkbox" htmlFor={ids.follow}>
          <input id={ids.follow} type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} data-testid="log-follow" />
          Follow
        </label>
        <span className="muted small">
          {logs.data?.run ? `run #${logs.data.run}, ` : ""}last {LINES} lines, refreshed every 2 s
        </span>
      </div>
      <ErrorNote error={logs.error} />
      <pre
        className="log"
        ref={box}
        tabIndex={0}
        aria-label="Driver log"
        data-testid="log-view"
        // Scrolling up stops following; scrolling back to the end resumes it. (Following
        // scrolls to the end itself, which keeps it on.)
        onScroll={(e) => {
          const el = e.currentTarget;
          setFollow(el.scrollHeight - el.scrollTop - el.clientHeight < 24);
        }}
      >
        {lines && lines.length > 0 ? lines.join("\n") : <span className="muted">{logs.isPending ? "Loading…" : "The log is empty."}</span>}
      </pre>
    </div>
  );
}
