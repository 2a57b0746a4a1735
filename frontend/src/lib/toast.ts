// A tiny store of notifications (mutation failures, finished operations), rendered by
// <Toasts/>; usable outside React (the query client's error hooks).
import { useSyncExternalStore } from "react";

export type ToastKind = "info" | "success" | "error";

export interface Toast {
  id: number;
  kind: ToastKind;
  text: string;
}

let toasts: readonly Toast[] = [];
let nextId = 1;
const listeners = new Set<() => void>();

function emit(): void {
  for (const l of listeners) l();
}

export function dismissToast(id: number): void {
  toasts = toasts.filter((t) => t.id !== id);
  emit();
}

export function showToast(kind: ToastKind, text: string, ms = kind === "error" ? 8000 : 4000): void {
  const id = nextId++;
  toasts = [...toasts.slice(-4), { id, kind, text }];
  emit();
  setTimeout(() => dismissToast(id), ms);
}

export function useToasts(): readonly Toast[] {
  return useSyncExternalStore(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    () => toasts,
  );
}
