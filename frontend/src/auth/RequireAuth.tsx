import type { ReactNode } from "react";
import { Navigate, useLocation } from "react-router";
import { useAuth } from "./AuthContext";

/** Signed out: go to the sign-in page, which comes back here afterwards. */
export function RequireAuth({ children }: { children: ReactNode }) {
  const { token } = useAuth();
  const location = useLocation();
  if (!token) {
    const from = location.pathname + location.search;
    return <Navigate to="/signin" replace state={{ from }} />;
  }
  return children;
}
