import { useMemo } from "react";
import { useDataflow } from "../../api/queries";
import type { DataflowNode } from "../../api/types";
import { ErrorNote } from "../../components/ErrorNote";
import { layoutDataflow, type Box, type Wire } from "../../lib/dataflowLayout";
import { formatBytes, formatCount, formatMs } from "../../lib/format";
import { usePipelineContext } from "../PipelineDetail";

/** The pipeline's dataflow: input, operators, views and sinks, each stateful operator with
 * its rows in and out, time and state in the newest step (polled). */
export function Dataflow() {
  const { pipeline } = usePipelineContext();
  const flow = useDataflow(pipeline.name);
  const layout = useMemo(() => (flow.data ? layoutDataflow(flow.data) : null), [flow.data]);
  return (
    <div>
      <ErrorNote error={flow.error} />
      {flow.data && (
        <p className="muted small" data-testid="dataflow-step">
          {flow.data.step === null || flow.data.step === undefined
            ? "No step yet: the figures come with the first one."
            : `Figures of step ${flow.data.step}: the changes into and out of each stateful operator, its time, and its state after the step.`}
        </p>
      )}
      {layout && (
        <div className="dataflow-wrap">
          <svg
            className="dataflow"
            width={layout.width}
            height={layout.height}
            viewBox={`0 0 ${layout.width} ${layout.height}`}
            role="img"
            aria-label={`Dataflow of ${pipeline.name}`}
            data-testid="dataflow-graph"
          >
            <defs>
              <marker id="dataflow-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
                <path d="M0,0 L10,5 L0,10 z" className="dataflow-arrowhead" />
              </marker>
            </defs>
            {layout.wires.map((w) => (
              <WirePath key={`${w.source}->${w.target}`} wire={w} />
            ))}
            {layout.boxes.map((b) => (
              <NodeBox key={b.node.id} box={b} />
            ))}
          </svg>
        </div>
      )}
    </div>
  );
}

function WirePath({ wire }: { wire: Wire }) {
  const d = wire.points.map((p, i) => `${i === 0 ? "M" : "L"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
  return <path d={d} className="dataflow-edge" markerEnd="url(#dataflow-arrow)" />;
}

function NodeBox({ box }: { box: Box }) {
  const { node: n, x, y, w, h } = box;
  const lines = figures(n);
  return (
    <g
      transform={`translate(${x},${y})`}
      className={`dataflow-node dataflow-${n.operator ? "operator" : n.kind}`}
      data-testid="dataflow-node"
      data-node={n.id}
      data-kind={n.kind}
      data-state-rows={n.metrics?.state_rows ?? undefined}
      data-lag={n.input?.lag ?? undefined}
      data-last-step={n.sink?.last_step ?? undefined}
    >
      <title>{`${n.id}${n.view ? ` (view ${n.view})` : ""}`}</title>
      <rect width={w} height={h} rx={6} />
      <text x={10} y={18} className="dataflow-label">
        {clip(n.label, 30)}
      </text>
      <text x={10} y={34} className="dataflow-id">
        {clip(n.operator ?? (n.kind === "table" || n.kind === "view" || n.kind === "sink" ? n.kind : n.id), 34)}
      </text>
      {lines.map((line, i) => (
        <text key={i} x={10} y={52 + 16 * i} className="dataflow-figures">
          {line}
        </text>
      ))}
    </g>
  );
}

function figures(n: DataflowNode): string[] {
  if (n.input) {
    const lag = n.input.lag;
    return [`offset ${formatCount(n.input.offset)} · lag ${lag === null || lag === undefined ? "—" : formatCount(lag)}`];
  }
  if (n.sink) {
    const last = n.sink.last_step;
    return [`last written step ${last === null || last === undefined ? "—" : formatCount(last)}`];
  }
  if (!n.operator) return [];
  const m = n.metrics;
  if (!m) return ["no step yet"];
  return [
    `in ${formatCount(m.rows_in)} · out ${formatCount(m.rows_out)} · ${formatMs(m.step_ms)}`,
    `state ${formatCount(m.state_rows)} rows · ${formatBytes(m.state_bytes)}`,
  ];
}

function clip(text: string, n: number): string {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}
