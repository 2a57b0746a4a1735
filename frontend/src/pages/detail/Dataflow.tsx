import { useMemo } from "react";
import { useDataflow } from "../../api/queries";
import type { DataflowNode } from "../../api/types";
import { ErrorNote } from "../../components/ErrorNote";
import { layoutDataflow, type Box, type Wire } from "../../lib/dataflowLayout";
import { formatBytes, formatCount, formatMs } from "../../lib/format";
import { formatSkew, shardLine, shardTable, share, type ShardFigure } from "../../lib/shards";
import { usePipelineContext } from "../PipelineDetail";

/** The pipeline's dataflow: input, operators, views and sinks, each stateful operator with
 * its rows in and out, time and state in the newest step (polled); a partitioned
 * pipeline's operators with each shard's, below the graph, so that skew shows. */
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
      {flow.data?.nodes.map((n) =>
        n.operator && n.metrics?.shards?.length ? <ShardBreakdown key={n.id} node={n} /> : null,
      )}
    </div>
  );
}

const SHARD_COLUMNS: { figure: ShardFigure; label: string; format: (v: number) => string; bar: boolean }[] = [
  { figure: "rows_in", label: "Rows in", format: formatCount, bar: true },
  { figure: "rows_out", label: "Rows out", format: formatCount, bar: false },
  { figure: "step_ms", label: "Time", format: formatMs, bar: true },
  { figure: "state_rows", label: "State rows", format: formatCount, bar: false },
  { figure: "state_bytes", label: "State size", format: formatBytes, bar: true },
];

/** A partitioned operator's shards in the newest step: a row each, bars scaled to the
 * largest shard, and the skew (the largest over the mean) of each figure. */
function ShardBreakdown({ node }: { node: DataflowNode }) {
  const t = shardTable(node.metrics?.shards ?? []);
  return (
    <section className="shards" data-testid="shards" data-operator={node.operator}>
      <h3>
        <code>{node.operator}</code> in {t.shards.length} shards
      </h3>
      <div className="table-wrap">
        <table className="table table-cards" data-testid="shard-table">
          <caption className="sr-only">{`Shards of ${node.operator ?? node.id}`}</caption>
          <thead>
            <tr>
              <th scope="col">Shard</th>
              {SHARD_COLUMNS.map((c) => (
                <th scope="col" key={c.figure} className="num">
                  {c.label}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {t.shards.map((s) => (
              <tr key={s.shard} data-testid="shard-row" data-shard={s.shard}>
                <td data-label="Shard" className="num">
                  {s.shard}
                </td>
                {SHARD_COLUMNS.map((c) => (
                  <td key={c.figure} data-label={c.label} className="num" data-figure={c.figure}>
                    {c.bar && (
                      <span className="shard-bar" aria-hidden="true" style={{ width: `${(100 * share(s[c.figure], t.max[c.figure])).toFixed(1)}%` }} />
                    )}
                    <span className="shard-value">{c.format(s[c.figure])}</span>
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
          <tfoot>
            <tr data-testid="shard-skew">
              <th scope="row" data-label="Skew" title="the largest shard's figure over the shards' mean (1.00×: even)">
                max / mean
              </th>
              {SHARD_COLUMNS.map((c) => (
                <td key={c.figure} data-label={c.label} className="num" data-figure={c.figure} data-skew={t.skew[c.figure] ?? undefined}>
                  {formatSkew(t.skew[c.figure])}
                </td>
              ))}
            </tr>
          </tfoot>
        </table>
      </div>
    </section>
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
      data-shards={n.metrics?.shards?.length || undefined}
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
  const lines = [
    `in ${formatCount(m.rows_in)} · out ${formatCount(m.rows_out)} · ${formatMs(m.step_ms)}`,
    `state ${formatCount(m.state_rows)} rows · ${formatBytes(m.state_bytes)}`,
  ];
  return m.shards?.length ? [...lines, shardLine(m.shards)] : lines;
}

function clip(text: string, n: number): string {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}
