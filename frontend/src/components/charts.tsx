// Shared pieces of the recharts time-series charts.
import type { ReactNode } from "react";
import { ResponsiveContainer } from "recharts";

export const COLORS = {
  in: "var(--chart-1)",
  out: "var(--chart-2)",
  p50: "var(--chart-1)",
  p99: "var(--chart-3)",
  spark: "var(--chart-1)",
  engine: "var(--chart-2)",
  commit: "var(--chart-4)",
  state: "var(--chart-5)",
} as const;

export function timeTick(ts: number): string {
  return new Date(ts * 1000).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export const axisProps = {
  stroke: "var(--muted)",
  tick: { fill: "var(--muted)", fontSize: 11 },
  tickLine: false,
} as const;

export const tooltipProps = {
  contentStyle: {
    background: "var(--surface)",
    border: "1px solid var(--border)",
    borderRadius: 6,
    color: "var(--text)",
    fontSize: 12,
  },
  labelStyle: { color: "var(--muted)" },
  isAnimationActive: false,
} as const;

/** A titled chart card; `value` is the headline number next to the title. */
export function ChartCard({
  title,
  value,
  testId,
  valueTestId,
  children,
  height = 220,
}: {
  title: string;
  value?: ReactNode;
  testId: string;
  valueTestId?: string;
  children: ReactNode;
  height?: number;
}) {
  return (
    <figure className="card chart-card" data-testid={testId}>
      <figcaption className="chart-head">
        <span className="chart-title">{title}</span>
        {value !== undefined && (
          <span className="chart-value" data-testid={valueTestId}>
            {value}
          </span>
        )}
      </figcaption>
      <div className="chart-body" style={{ height }}>
        <ResponsiveContainer width="100%" height="100%" initialDimension={{ width: 320, height }}>
          {children as React.ReactElement}
        </ResponsiveContainer>
      </div>
    </figure>
  );
}
