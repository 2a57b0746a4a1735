// The API token lives in sessionStorage (per tab, gone when the tab closes). The API
// client reads it on every request; a 401 anywhere tells the listeners (the auth context)
// so the console returns to the sign-in page.

const KEY = "spindle.token";

type Listener = (message: string) => void;
const listeners = new Set<Listener>();

function storage(): Storage | undefined {
  try {
    return typeof sessionStorage === "undefined" ? undefined : sessionStorage;
  } catch {
    return undefined; // storage disabled by the browser
  }
}

export function getToken(): string | null {
  return storage()?.getItem(KEY) ?? null;
}

export function setToken(token: string | null): void {
  const s = storage();
  if (!s) return;
  if (token) s.setItem(KEY, token);
  else s.removeItem(KEY);
}

export function onUnauthorized(l: Listener): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

export function reportUnauthorized(message: string): void {
  for (const l of listeners) l(message);
}
