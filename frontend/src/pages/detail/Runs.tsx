import { useRuns } from "../../api/queries";
import { ErrorNote } from "../../components/ErrorNote";
import { StateBadge } from "../../components/StateBadge";
import { formatDateTime } from "../../lib/format";
import { usePipelineContext } from "../PipelineDetail";

export function Runs() {
  const { pipeline } = usePipelineContext();
  const runs = useRuns(pipeline.name);
  return (
    <div>
      <ErrorNote error={runs.error} />
      {runs.data && runs.data.length === 0 && <p className="note">No runs yet: start the pipeline.</p>}
      {runs.data && runs.data.length > 0 && (
        <div className="table-wrap">
          <table className="table table-cards" data-testid="runs-table">
            <caption className="sr-only">Runs, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">State</th>
                <th scope="col">Started</th>
                <th scope="col">Ended</th>
                <th scope="col">Steps</th>
                <th scope="col">Restarts</th>
                <th scope="col">From</th>
                <th scope="col">Exit</th>
              </tr>
            </thead>
            <tbody>
              {runs.data.map((r) => (
                <tr key={r.id} data-testid={`run-row-${r.number}`}>
                  <td data-label="Run" className="num">
                    #{r.number}
                  </td>
                  <td data-label="State">
                    <StateBadge state={r.state} testId="run-state" />
                  </td>
                  <td data-label="Started">{formatDateTime(r.started_at ?? r.created_at)}</td>
                  <td data-label="Ended">{r.ended_at ? formatDateTime(r.ended_at) : <span className="muted">—</span>}</td>
                  <td data-label="Steps" className="num">
                    {r.first_step ?? "—"} … {r.last_step ?? "—"}
                  </td>
                  <td data-label="Restarts" className="num">
                    {r.restart_count}
                  </td>
                  <td data-label="From">
                    <code title={r.restored_checkpoint ?? undefined}>
                      {r.restored_checkpoint ? r.restored_checkpoint.split("-")[0] : r.from_checkpoint}
                    </code>
                  </td>
                  <td data-label="Exit">
                    {r.exit_code !== null && <code>{r.exit_code}</code>} {r.exit_reason ?? (r.exit_code === null ? <span className="muted">—</span> : null)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
