import { useId, useState, type FormEvent } from "react";
import { Navigate, useLocation, useNavigate } from "react-router";
import { asErrorBody } from "../api/errors";
import { useAuth } from "../auth/AuthContext";

function fromState(state: unknown): string {
  if (typeof state === "object" && state !== null && "from" in state) {
    const f = (state as { from: unknown }).from;
    if (typeof f === "string" && f.startsWith("/") && !f.startsWith("/signin")) return f;
  }
  return "/pipelines";
}

/** Paste an API token; it is checked against the API before it is kept (sessionStorage). */
export function SignIn() {
  const { token, message, signIn } = useAuth();
  const navigate = useNavigate();
  const location = useLocation();
  const target = fromState(location.state);
  const inputId = useId();
  const helpId = useId();
  const [value, setValue] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  if (token) return <Navigate to={target} replace />;

  async function submit(e: FormEvent) {
    e.preventDefault();
    const t = value.trim();
    if (!t) {
      setError("Paste an API token first.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const res = await fetch("/api/v1/pipelines", { headers: { Authorization: `Bearer ${t}` } });
      if (res.ok) {
        signIn(t);
        navigate(target, { replace: true });
        return;
      }
      const body = asErrorBody(await res.json().catch(() => undefined));
      setError(
        res.status === 401
          ? `The API rejected this token: ${body?.message ?? "unauthorized"}.`
          : `Cannot sign in (HTTP ${res.status}): ${body?.message ?? res.statusText}`,
      );
    } catch (err) {
      setError(`Cannot reach the API: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      setBusy(false);
    }
  }

  return (
    <main className="signin">
      <form className="card signin-card" onSubmit={submit} noValidate>
        <h1>Sign in to Spindle</h1>
        {message && (
          <p className="note note-warn" role="alert" data-testid="signin-message">
            {message}
          </p>
        )}
        <label htmlFor={inputId}>API token</label>
        <input
          id={inputId}
          type="password"
          autoComplete="off"
          spellCheck={false}
          placeholder="spd_…"
          value={value}
          onChange={(e) => setValue(e.target.value)}
          aria-describedby={helpId}
          aria-invalid={error ? true : undefined}
          data-testid="signin-token"
          autoFocus
        />
        <p id={helpId} className="help">
          A viewer, operator or admin token. The embedded server writes the first admin token to{" "}
          <code>.spindle-data/admin-token</code>. It is kept in this tab only (sessionStorage).
        </p>
        {error && (
          <p className="note note-error" role="alert" data-testid="signin-error">
            {error}
          </p>
        )}
        <button type="submit" className="btn btn-primary" disabled={busy} data-testid="signin-submit">
          {busy ? "Checking…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}
