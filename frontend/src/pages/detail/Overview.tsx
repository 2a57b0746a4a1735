import { useMemo } from "react";
import {
  Area,
  AreaChart,
  CartesianGrid,
  Legend,
  Line,
  LineChart,
  Tooltip,
  XAxis,
  YAxis,
} from "recharts";
import { axisProps, ChartCard, COLORS, timeTick, tooltipProps } from "../../components/charts";
import { formatBytes, formatCount, formatMs, formatRate } from "../../lib/format";
import { latency, throughput } from "../../lib/metrics";
import { useMetricStream } from "../../lib/useMetricStream";
import { usePipelineContext } from "../PipelineDetail";

const LATENCY_WINDOW = 30;

function compact(n: number): string {
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (Math.abs(n) >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return `${Math.round(n)}`;
}

const xAxis = (
  <XAxis dataKey="ts" type="number" domain={["dataMin", "dataMax"]} tickFormatter={timeTick} minTickGap={40} {...axisProps} />
);

function tsLabel(label: unknown): string {
  return typeof label === "number" ? timeTick(label) : String(label);
}

/** Live charts over the metrics stream (SSE). */
export function Overview() {
  const { pipeline } = usePipelineContext();
  const stream = useMetricStream(pipeline.name);
  const { samples } = stream;

  const rows = useMemo(() => [...samples], [samples]);
  const rates = useMemo(() => throughput(samples), [samples]);
  const lat = useMemo(() => latency(samples, LATENCY_WINDOW), [samples]);
  const last = samples.length ? samples[samples.length - 1] : undefined;
  const lastRate = rates.length ? rates[rates.length - 1] : undefined;
  const lastLat = lat.length ? lat[lat.length - 1] : undefined;
  const lastE2e = useMemo(() => [...lat].reverse().find((p) => p.e2e !== null)?.e2e ?? undefined, [lat]);

  return (
    <div className="overview">
      <div className="stream-line">
        <span className={`dot dot-${stream.status}`} aria-hidden="true" />
        <span data-testid="stream-status" data-status={stream.status}>
          {stream.status === "open" ? "Live" : stream.status}
          {stream.error && stream.status !== "open" ? `: ${stream.error}` : ""}
        </span>
        <span className="muted small">
          {samples.length} {samples.length === 1 ? "sample" : "samples"}
        </span>
      </div>

      <dl className="stats">
        <div>
          <dt>Step</dt>
          <dd data-testid="live-step">{last?.step ?? pipeline.last_step ?? "—"}</dd>
        </div>
        <div>
          <dt>State</dt>
          <dd data-testid="live-state">{pipeline.state}</dd>
        </div>
        <div>
          <dt>Run</dt>
          <dd data-testid="live-run">{pipeline.current_run ? `#${pipeline.current_run.number}` : "—"}</dd>
        </div>
        <div>
          <dt>Rows in</dt>
          <dd>{formatRate(lastRate?.inPerS)}</dd>
        </div>
        <div>
          <dt>Rows out</dt>
          <dd data-testid="throughput-out-value">{formatRate(lastRate?.outPerS)}</dd>
        </div>
        <div>
          <dt>Latency p50 / p99</dt>
          <dd>
            {formatMs(lastLat?.p50)} / {formatMs(lastLat?.p99)}
          </dd>
        </div>
        <div>
          <dt title="sink write done minus the oldest event time of the step's rows">End-to-end</dt>
          <dd data-testid="e2e-latency-value">{formatMs(lastE2e)}</dd>
        </div>
        <div>
          <dt>State size</dt>
          <dd>
            {formatBytes(last?.state_bytes)} · {formatCount(last?.state_rows)} rows
          </dd>
        </div>
        <div>
          <dt title="state batches in memory after the newest step, of the spec's engine.memory_budget (shards summed); the rest is in files">
            Memory
          </dt>
          <dd data-testid="memory-value">
            {last?.memory_budget_bytes ? `${formatBytes(last.memory_bytes)} of ${formatBytes(last.memory_budget_bytes)}` : "—"}
          </dd>
        </div>
        <div>
          <dt>Dead letters</dt>
          <dd>{formatCount(last?.dead_letters)}</dd>
        </div>
        <div>
          <dt title="input rows dropped in the last step for coming later than the watermark">Late rows</dt>
          <dd>{formatCount(last?.late_rows)}</dd>
        </div>
      </dl>

      {samples.length === 0 && (
        <p className="note" data-testid="no-samples">
          No samples yet. {pipeline.state === "running" ? "Waiting for the first step…" : "Start the pipeline to see live metrics."}
        </p>
      )}

      <div className="charts">
        <ChartCard
          title="Throughput (rows/s)"
          value={formatRate(lastRate?.inPerS)}
          testId="chart-throughput"
          valueTestId="throughput-value"
        >
          <LineChart data={rates} margin={{ top: 8, right: 12, bottom: 0, left: 0 }}>
            <CartesianGrid stroke="var(--grid)" vertical={false} />
            {xAxis}
            <YAxis tickFormatter={compact} width={48} {...axisProps} />
            <Tooltip {...tooltipProps} labelFormatter={tsLabel} formatter={(v) => formatRate(Number(v))} />
            <Legend wrapperStyle={{ fontSize: 12 }} />
            <Line name="in" dataKey="inPerS" stroke={COLORS.in} dot={false} strokeWidth={2} isAnimationActive={false} />
            <Line name="out" dataKey="outPerS" stroke={COLORS.out} dot={false} strokeWidth={2} isAnimationActive={false} />
          </LineChart>
        </ChartCard>

        <ChartCard
          title={`Latency, ms (step p50/p99 over the last ${LATENCY_WINDOW} steps; end-to-end per step)`}
          value={`p50 ${formatMs(lastLat?.p50)} · p99 ${formatMs(lastLat?.p99)}`}
          testId="chart-latency"
          valueTestId="latency-value"
        >
          <LineChart data={lat} margin={{ top: 8, right: 12, bottom: 0, left: 0 }}>
            <CartesianGrid stroke="var(--grid)" vertical={false} />
            {xAxis}
            <YAxis tickFormatter={compact} width={48} {...axisProps} />
            <Tooltip {...tooltipProps} labelFormatter={tsLabel} formatter={(v) => formatMs(Number(v))} />
            <Legend wrapperStyle={{ fontSize: 12 }} />
            <Line name="p50" dataKey="p50" stroke={COLORS.p50} dot={false} strokeWidth={2} isAnimationActive={false} />
            <Line name="p99" dataKey="p99" stroke={COLORS.p99} dot={false} strokeWidth={2} isAnimationActive={false} />
            {lastE2e !== undefined && (
              <Line name="end-to-end" dataKey="e2e" stroke={COLORS.commit} dot={false} strokeWidth={2} connectNulls isAnimationActive={false} />
            )}
          </LineChart>
        </ChartCard>

        <ChartCard title="Step time breakdown (ms)" value={last ? formatMs(last.step_ms) : undefined} testId="chart-breakdown">
          <AreaChart data={rows} margin={{ top: 8, right: 12, bottom: 0, left: 0 }}>
            <CartesianGrid stroke="var(--grid)" vertical={false} />
            {xAxis}
            <YAxis tickFormatter={compact} width={48} {...axisProps} />
            <Tooltip {...tooltipProps} labelFormatter={tsLabel} formatter={(v) => formatMs(Number(v))} />
            <Legend wrapperStyle={{ fontSize: 12 }} />
            <Area name="spark" dataKey="spark_ms" stackId="t" stroke={COLORS.spark} fill={COLORS.spark} fillOpacity={0.5} isAnimationActive={false} />
            <Area name="engine" dataKey="engine_ms" stackId="t" stroke={COLORS.engine} fill={COLORS.engine} fillOpacity={0.5} isAnimationActive={false} />
            <Area name="commit" dataKey="commit_ms" stackId="t" stroke={COLORS.commit} fill={COLORS.commit} fillOpacity={0.5} isAnimationActive={false} />
          </AreaChart>
        </ChartCard>

        <ChartCard title="State size" value={formatBytes(last?.state_bytes)} testId="chart-state" valueTestId="state-bytes-value">
          <AreaChart data={rows} margin={{ top: 8, right: 12, bottom: 0, left: 0 }}>
            <CartesianGrid stroke="var(--grid)" vertical={false} />
            {xAxis}
            <YAxis tickFormatter={(v: number) => formatBytes(v)} width={72} {...axisProps} />
            <Tooltip {...tooltipProps} labelFormatter={tsLabel} formatter={(v) => formatBytes(Number(v))} />
            <Area name="state bytes" dataKey="state_bytes" stroke={COLORS.state} fill={COLORS.state} fillOpacity={0.3} isAnimationActive={false} />
            <Area name="in memory" dataKey="memory_bytes" stroke={COLORS.engine} fill={COLORS.engine} fillOpacity={0.3} isAnimationActive={false} />
          </AreaChart>
        </ChartCard>
      </div>
    </div>
  );
}
