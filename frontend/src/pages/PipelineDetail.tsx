import { Link, NavLink, Outlet, useNavigate, useOutletContext, useParams } from "react-router";
import { usePipeline } from "../api/queries";
import type { Pipeline } from "../api/types";
import { ErrorNote } from "../components/ErrorNote";
import { PipelineActions } from "../components/PipelineActions";
import { StateBadge } from "../components/StateBadge";

const TABS = [
  { to: "", label: "Overview", end: true },
  { to: "dataflow", label: "Dataflow" },
  { to: "checkpoints", label: "Checkpoints" },
  { to: "runs", label: "Runs" },
  { to: "logs", label: "Logs" },
  { to: "views", label: "Views" },
] as const;

export interface DetailContext {
  pipeline: Pipeline;
}

export function usePipelineContext(): DetailContext {
  return useOutletContext<DetailContext>();
}

/** `/pipelines/:name`: the header (state, step, run, actions) and the tabs. */
export function PipelineDetail() {
  const { name = "" } = useParams();
  const navigate = useNavigate();
  const p = usePipeline(name);
  const base = `/pipelines/${encodeURIComponent(name)}`;

  if (p.error && !p.data) {
    return (
      <section>
        <h1>{name}</h1>
        <ErrorNote error={p.error} testId="pipeline-error" />
        <Link to="/pipelines">Back to the pipelines</Link>
      </section>
    );
  }
  if (!p.data) return <p className="muted">Loading…</p>;
  const pipeline = p.data;
  const run = pipeline.current_run;

  return (
    <section aria-labelledby="pipeline-title">
      <div className="page-head">
        <div>
          <h1 id="pipeline-title" className="pipeline-title">
            {pipeline.name} <StateBadge state={pipeline.state} />
          </h1>
          {pipeline.description && <p className="muted">{pipeline.description}</p>}
        </div>
        <PipelineActions pipeline={pipeline} showEdit startOptions onDeleted={() => navigate("/pipelines")} />
      </div>
      <dl className="facts">
        <div>
          <dt>Current step</dt>
          <dd data-testid="current-step">{pipeline.last_step ?? "—"}</dd>
        </div>
        <div>
          <dt>Run</dt>
          <dd data-testid="current-run">{run ? `#${run.number} (${run.state})` : "—"}</dd>
        </div>
        <div>
          <dt>Restarts (this run)</dt>
          <dd>{run ? run.restart_count : "—"}</dd>
        </div>
        <div>
          <dt>Checkpoints</dt>
          <dd>{pipeline.checkpoints}</dd>
        </div>
        <div>
          <dt>Desired</dt>
          <dd>{pipeline.desired_state}</dd>
        </div>
        {pipeline.forked_from && (
          <div data-testid="forked-from">
            <dt>Forked from</dt>
            <dd>
              <Link to={`/pipelines/${encodeURIComponent(pipeline.forked_from.pipeline)}`}>
                {pipeline.forked_from.pipeline}
              </Link>{" "}
              at step {pipeline.forked_from.step} (<code>{pipeline.forked_from.checkpoint.split("-")[0]}</code>)
            </dd>
          </div>
        )}
        {pipeline.restore_point && (
          <div>
            <dt>Next start resumes from</dt>
            <dd>
              <code>{pipeline.restore_point.split("-")[0]}</code>
            </dd>
          </div>
        )}
      </dl>
      {pipeline.error && (
        <p className="note note-error" data-testid="pipeline-error">
          {pipeline.error}
        </p>
      )}
      {pipeline.durability_error && (
        <p className="note note-error" data-testid="pipeline-durability-error">
          Not durable: {pipeline.durability_error}
        </p>
      )}
      <ErrorNote error={p.error} />
      <nav className="tabs" aria-label="Pipeline sections">
        {TABS.map((t) => (
          <NavLink
            key={t.label}
            to={t.to ? `${base}/${t.to}` : base}
            end={"end" in t ? t.end : false}
            className={({ isActive }) => `tab${isActive ? " tab-active" : ""}`}
            data-testid={`tab-${t.label.toLowerCase()}`}
          >
            {t.label}
          </NavLink>
        ))}
      </nav>
      <div className="tab-panel">
        <Outlet context={{ pipeline } satisfies DetailContext} />
      </div>
    </section>
  );
}
