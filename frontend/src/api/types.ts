// Names for the generated schema's shapes (src/api/schema.d.ts, from the backend's OpenAPI).
import type { components } from "./schema";

type S = components["schemas"];

export type Pipeline = S["PipelineOut"];
export type PipelineState = S["PipelineState"];
export type RunBrief = S["RunBrief"];
export type Run = S["RunOut"];
export type RunState = S["RunState"];
export type Checkpoint = S["CheckpointOut"];
export type Retention = S["RetentionOut"];
export type RetentionIn = S["RetentionIn"];
export type Operation = S["OperationOut"];
export type OperationStatus = S["OperationStatus"];
export type Metric = S["MetricOut"];
export type ViewPage = S["ViewPage"];
export type LogOut = S["LogOut"];
export type SpecValidation = S["SpecValidation"];
export type Dataflow = S["DataflowOut"];
export type DataflowNode = S["DataflowNode"];
export type ShardStep = S["ShardStepOut"];

/** Every error body of the API (backend/schemas/common.py ErrorOut). The OpenAPI document
 * only declares FastAPI's default 422 shape, so this one is written by hand. */
export interface FieldError {
  field: string;
  message: string;
}

export interface ErrorBody {
  code: string;
  message: string;
  errors: FieldError[];
  details: Record<string, unknown>;
}
