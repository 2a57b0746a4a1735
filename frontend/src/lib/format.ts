// Display helpers: times from the API, sizes, durations, rates, ids.

/** A timestamp of the API as epoch ms. The API writes UTC datetimes, sometimes without an
 * offset ("2026-01-02T03:04:05.123456"); those are UTC, not local time. */
export function parseTime(value: string | null | undefined): number | undefined {
  if (!value) return undefined;
  const hasZone = /([zZ]|[+-]\d\d:?\d\d)$/.test(value);
  const ms = Date.parse(hasZone ? value : `${value}Z`);
  return Number.isNaN(ms) ? undefined : ms;
}

export function formatDateTime(value: string | null | undefined): string {
  const ms = parseTime(value);
  if (ms === undefined) return "—";
  return new Date(ms).toLocaleString(undefined, {
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  });
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return `${u === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)} ${UNITS[u]}`;
}

export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** "42 s", "5 min", "3 h", "2 d" for a non-negative number of seconds. */
export function formatAge(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, seconds);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

export function formatRate(perSecond: number | null | undefined): string {
  if (perSecond === null || perSecond === undefined || !Number.isFinite(perSecond)) return "—";
  const v = Math.max(0, perSecond);
  if (v >= 1e6) return `${(v / 1e6).toFixed(2)}M rows/s`;
  if (v >= 1e4) return `${(v / 1e3).toFixed(1)}k rows/s`;
  return `${v.toFixed(v < 10 ? 1 : 0)} rows/s`;
}

export function formatCount(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  return n.toLocaleString();
}

/** The first group of a uuid: enough to tell checkpoints apart in a table. */
export function shortId(uuid: string | null | undefined): string {
  if (!uuid) return "—";
  return uuid.split("-")[0] ?? uuid;
}
