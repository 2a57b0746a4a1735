import { useMemo } from "react";
import { Link } from "react-router";
import { useCheckpoints, useMetricsHistory, usePipelines, useRuns } from "../api/queries";
import type { Pipeline } from "../api/types";
import { ErrorNote } from "../components/ErrorNote";
import { PipelineActions } from "../components/PipelineActions";
import { Sparkline } from "../components/Sparkline";
import { StateBadge } from "../components/StateBadge";
import { formatAge, parseTime } from "../lib/format";
import { useNow } from "../lib/hooks";
import { throughput } from "../lib/metrics";

export function PipelineList() {
  const pipelines = usePipelines();
  const now = useNow(1000);
  return (
    <section aria-labelledby="pipelines-title">
      <div className="page-head">
        <h1 id="pipelines-title">Pipelines</h1>
        <Link to="/pipelines/new" className="btn btn-primary" data-testid="btn-new-pipeline">
          New pipeline
        </Link>
      </div>
      <ErrorNote error={pipelines.error} testId="pipelines-error" />
      {pipelines.isPending && <p className="muted">Loading…</p>}
      {pipelines.data && pipelines.data.length === 0 && (
        <div className="card empty" data-testid="pipelines-empty">
          <p>No pipelines yet.</p>
          <Link to="/pipelines/new" className="btn btn-primary">
            Create the first one
          </Link>
        </div>
      )}
      {pipelines.data && pipelines.data.length > 0 && (
        <div className="table-wrap">
          <table className="table table-cards" data-testid="pipelines-table">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">State</th>
                <th scope="col">Step</th>
                <th scope="col">Throughput (rows in)</th>
                <th scope="col">Last checkpoint</th>
                <th scope="col">Restarts</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {pipelines.data.map((p) => (
                <PipelineRow key={p.name} pipeline={p} now={now} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function PipelineRow({ pipeline, now }: { pipeline: Pipeline; now: number }) {
  const name = pipeline.name;
  const metrics = useMetricsHistory(name, 60);
  const checkpoints = useCheckpoints(name);
  const runs = useRuns(name);

  const points = useMemo(() => throughput(metrics.data ?? []), [metrics.data]);
  const lastCheckpoint = useMemo(() => {
    let newest: number | undefined;
    for (const c of checkpoints.data ?? []) {
      const t = parseTime(c.created_at);
      if (t !== undefined && (newest === undefined || t > newest)) newest = t;
    }
    return newest;
  }, [checkpoints.data]);
  const restarts = runs.data ? runs.data.filter((r) => r.restart_count > 0).length : undefined;

  return (
    <tr data-testid={`pipeline-row-${name}`}>
      <td data-label="Name">
        <Link to={`/pipelines/${encodeURIComponent(name)}`} className="strong" data-testid="pipeline-link">
          {name}
        </Link>
        {pipeline.description && <div className="muted small">{pipeline.description}</div>}
        {pipeline.error && <div className="error-text small">{pipeline.error}</div>}
      </td>
      <td data-label="State">
        <StateBadge state={pipeline.state} />
      </td>
      <td data-label="Step" className="num" data-testid="current-step">
        {pipeline.last_step ?? "—"}
      </td>
      <td data-label="Throughput">
        <Sparkline points={points} testId="sparkline" />
      </td>
      <td data-label="Last checkpoint" data-testid="last-checkpoint">
        {lastCheckpoint === undefined ? (
          <span className="muted">none</span>
        ) : (
          <span title={new Date(lastCheckpoint).toLocaleString()}>{formatAge((now - lastCheckpoint) / 1000)} ago</span>
        )}
      </td>
      <td data-label="Restarts" className="num" data-testid="restarts">
        {restarts ?? "—"}
      </td>
      <td data-label="Actions">
        <PipelineActions pipeline={pipeline} compact />
      </td>
    </tr>
  );
}
