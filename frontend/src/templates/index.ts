// Starting points for the spec editor, copied from docs/examples/: one or more per source kind.
import clicksPerMinute from "./clicks-per-minute.yaml?raw";
import clicksPerUser from "./clicks-per-user.yaml?raw";
import ingestLog from "./ingest-log.yaml?raw";
import nexmarkQ3 from "./nexmark-q3.yaml?raw";
import ordersFromFiles from "./orders-from-files.yaml?raw";

export interface Template {
  id: string;
  source: "datagen" | "files" | "log";
  label: string;
  text: string;
}

export const TEMPLATES: readonly Template[] = [
  { id: "clicks-per-user", source: "datagen", label: "datagen → per-user aggregate → Parquet files", text: clicksPerUser },
  { id: "clicks-per-minute", source: "datagen", label: "datagen → windowed counts → JSON lines", text: clicksPerMinute },
  { id: "nexmark-q3", source: "datagen", label: "datagen (nexmark) → join → view", text: nexmarkQ3 },
  { id: "orders-from-files", source: "files", label: "files → distinct → Postgres", text: ordersFromFiles },
  { id: "ingest-log", source: "log", label: "log (ingest API) → max per key → view", text: ingestLog },
];
