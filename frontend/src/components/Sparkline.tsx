import { Line, LineChart, YAxis } from "recharts";
import { formatRate } from "../lib/format";
import type { ThroughputPoint } from "../lib/metrics";

/** A small rows-in-per-second line, no axes; the latest value next to it. */
export function Sparkline({ points, testId }: { points: readonly ThroughputPoint[]; testId?: string }) {
  const latest = points.length ? points[points.length - 1]?.inPerS : undefined;
  return (
    <div className="sparkline" data-testid={testId}>
      <div className="sparkline-chart" aria-hidden="true">
        {points.length > 1 ? (
          <LineChart width={120} height={32} data={points as ThroughputPoint[]} margin={{ top: 2, right: 2, bottom: 2, left: 2 }}>
            <YAxis hide domain={[0, "auto"]} />
            <Line type="monotone" dataKey="inPerS" stroke="var(--accent)" strokeWidth={1.5} dot={false} activeDot={false} isAnimationActive={false} />
          </LineChart>
        ) : (
          <span className="muted">no data</span>
        )}
      </div>
      <span className="sparkline-value">{formatRate(latest)}</span>
    </div>
  );
}
