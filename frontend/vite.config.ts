import react from "@vitejs/plugin-react";
import { defineConfig } from "vitest/config";

// The API server the dev server and `vite preview` forward to; `python -m backend serve`
// listens on 127.0.0.1:8080 by default. Override: SPINDLE_API=http://127.0.0.1:8190 npm run dev
const api = process.env.SPINDLE_API ?? "http://127.0.0.1:8080";
const proxy = Object.fromEntries(
  ["/api", "/healthz", "/readyz", "/metrics"].map((p) => [p, { target: api, changeOrigin: true }]),
);

export default defineConfig({
  // The backend serves the build at /ui/ (every unknown path under it falls back to
  // index.html); the router's basename is /ui as well.
  base: "/ui/",
  plugins: [react()],
  server: { port: 5173, proxy },
  preview: { port: 4173, proxy },
  build: {
    // Into the backend package (backend/api/ui.py serves it), so that the wheel ships the
    // console as package data. Outside this folder, Vite empties it only when told to.
    outDir: "../backend/api/console",
    emptyOutDir: true,
    sourcemap: true,
    chunkSizeWarningLimit: 600,
    rollupOptions: {
      output: {
        // Libraries change less often than the console: separate files cache longer.
        manualChunks(id) {
          if (!id.includes("node_modules")) return undefined;
          // The spec editor's schema check loads ajv on demand (a dynamic import).
          if (/[\\/](ajv|fast-uri|fast-deep-equal|json-schema-traverse|require-from-string)[\\/]/.test(id)) return "schema-check";
          // The spec editor (CodeMirror) too.
          if (/[\\/](@codemirror|@lezer|@marijn|crelt|style-mod|w3c-keyname)[\\/]/.test(id)) return "codemirror";
          if (/[\\/](recharts|d3-[^\\/]+|victory-vendor|@reduxjs|redux|immer|reselect|decimal\.js-light|es-toolkit)[\\/]/.test(id)) return "charts";
          return "vendor";
        },
      },
    },
  },
  test: {
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
