import { ApiError, describeError } from "../api/errors";

/** A failed request, said plainly; a 403 says the token's role is not enough. */
export function ErrorNote({ error, testId }: { error: unknown; testId?: string }) {
  if (!error) return null;
  const forbidden = error instanceof ApiError && error.status === 403;
  return (
    <div className={`note note-error${forbidden ? " note-forbidden" : ""}`} role="alert" data-testid={testId}>
      {describeError(error)}
      {error instanceof ApiError && error.errors.length > 0 && (
        <ul>
          {error.errors.map((e, i) => (
            <li key={i}>
              <code>{e.field}</code>: {e.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
