import { useQueryClient } from "@tanstack/react-query";
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { getToken, onUnauthorized, setToken } from "./token";

interface Auth {
  token: string | null;
  /** Why the console is at the sign-in page (a rejected token, signing out). */
  message: string | null;
  signIn: (token: string) => void;
  signOut: (message?: string) => void;
}

const AuthContext = createContext<Auth | null>(null);

export function AuthProvider({ children }: { children: ReactNode }) {
  const qc = useQueryClient();
  const [token, setTokenState] = useState<string | null>(() => getToken());
  const [message, setMessage] = useState<string | null>(null);

  const signOut = useCallback(
    (why?: string) => {
      setToken(null);
      setTokenState(null);
      setMessage(why ?? null);
      qc.cancelQueries().catch(() => {});
      qc.clear();
    },
    [qc],
  );

  const signIn = useCallback((t: string) => {
    setToken(t);
    setTokenState(t);
    setMessage(null);
  }, []);

  useEffect(
    () =>
      onUnauthorized((why) => {
        if (getToken() === null) return; // already signed out
        signOut(`Your token was rejected (401): ${why}. Sign in again with a valid token.`);
      }),
    [signOut],
  );

  const value = useMemo(() => ({ token, message, signIn, signOut }), [token, message, signIn, signOut]);
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}

export function useAuth(): Auth {
  const a = useContext(AuthContext);
  if (!a) throw new Error("useAuth outside <AuthProvider>");
  return a;
}
