import { Link, NavLink, Navigate, Outlet, Route, Routes } from "react-router";
import { useVersion } from "./api/queries";
import { useAuth } from "./auth/AuthContext";
import { RequireAuth } from "./auth/RequireAuth";
import { Toasts } from "./components/Toasts";
import { PipelineDetail } from "./pages/PipelineDetail";
import { PipelineEditor } from "./pages/PipelineEditor";
import { PipelineList } from "./pages/PipelineList";
import { SignIn } from "./pages/SignIn";
import { Checkpoints } from "./pages/detail/Checkpoints";
import { Dataflow } from "./pages/detail/Dataflow";
import { Logs } from "./pages/detail/Logs";
import { Overview } from "./pages/detail/Overview";
import { Runs } from "./pages/detail/Runs";
import { Views } from "./pages/detail/Views";

function Layout() {
  const { signOut } = useAuth();
  const version = useVersion();
  return (
    <>
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Link to="/pipelines" className="brand">
          <span className="brand-mark" aria-hidden="true" />
          Spindle
        </Link>
        <nav aria-label="Main">
          <NavLink to="/pipelines">
            Pipelines
          </NavLink>
        </nav>
        <span className="spacer" />
        <a className="topbar-link" href="/api/v1/docs" target="_blank" rel="noreferrer">
          API docs
        </a>
        <button type="button" className="btn btn-small" onClick={() => signOut("You signed out.")} data-testid="btn-signout">
          Sign out
        </button>
      </header>
      <main id="main" className="content">
        <Outlet />
      </main>
      <footer className="footer" data-testid="footer">
        Spindle <span data-testid="version">{version.data?.version ?? "…"}</span>
      </footer>
    </>
  );
}

function NotFound() {
  return (
    <div className="card">
      <h1>Not found</h1>
      <p>
        Nothing lives at this address. <Link to="/pipelines">Back to the pipelines</Link>.
      </p>
    </div>
  );
}

export function App() {
  return (
    <>
      <Routes>
        <Route path="/signin" element={<SignIn />} />
        <Route
          element={
            <RequireAuth>
              <Layout />
            </RequireAuth>
          }
        >
          <Route index element={<Navigate to="/pipelines" replace />} />
          <Route path="pipelines" element={<PipelineList />} />
          <Route path="pipelines/new" element={<PipelineEditor mode="create" />} />
          <Route path="pipelines/:name/edit" element={<PipelineEditor mode="edit" />} />
          <Route path="pipelines/:name" element={<PipelineDetail />}>
            <Route index element={<Overview />} />
            <Route path="dataflow" element={<Dataflow />} />
            <Route path="checkpoints" element={<Checkpoints />} />
            <Route path="runs" element={<Runs />} />
            <Route path="logs" element={<Logs />} />
            <Route path="views" element={<Views />} />
          </Route>
          <Route path="*" element={<NotFound />} />
        </Route>
      </Routes>
      <Toasts />
    </>
  );
}
