import { useEffect, useId, useRef, type ReactNode } from "react";
import { ErrorNote } from "./ErrorNote";

interface Props {
  open: boolean;
  title: string;
  children?: ReactNode;
  confirmLabel: string;
  danger?: boolean;
  busy?: boolean;
  /** The confirmed action's failure, shown inside the dialog. */
  error?: unknown;
  onConfirm: () => void;
  onCancel: () => void;
}

/** A modal confirmation on the native <dialog> (focus stays inside, Escape cancels). It is
 * in the document only while open, so `confirm-dialog` always means the visible one. */
export function ConfirmDialog(props: Props) {
  if (!props.open) return null;
  return <OpenDialog {...props} />;
}

function OpenDialog({ title, children, confirmLabel, danger, busy, error, onConfirm, onCancel }: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  const titleId = useId();
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => {
      if (d?.open) d.close();
    };
  }, []);
  return (
    <dialog
      ref={ref}
      className="dialog"
      aria-labelledby={titleId}
      data-testid="confirm-dialog"
      onCancel={(e) => {
        e.preventDefault();
        onCancel();
      }}
    >
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          onConfirm();
        }}
      >
        <h2 id={titleId}>{title}</h2>
        <div className="dialog-body">{children}</div>
        <ErrorNote error={error} testId="confirm-error" />
        <div className="dialog-actions">
          <button type="button" className="btn" onClick={onCancel} data-testid="confirm-cancel" autoFocus>
            Cancel
          </button>
          <button type="submit" className={`btn ${danger ? "btn-danger" : "btn-primary"}`} disabled={busy} data-testid="confirm-ok">
            {busy ? "Working…" : confirmLabel}
          </button>
        </div>
      </form>
    </dialog>
  );
}
