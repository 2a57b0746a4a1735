# syntax=docker/dockerfile:1
# The web console: built with Vite (base /ui/), served by unprivileged nginx on port 8080,
# which also proxies the API (deploy/nginx.conf). Build context: the repository root.

FROM node:22-bookworm-slim AS build
WORKDIR /src/frontend
# Dependencies first (package-lock.json exactly), then the sources.
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY frontend/ ./
RUN npm run build

FROM nginxinc/nginx-unprivileged:1.28-alpine
# Replaces the image's default server.
COPY deploy/nginx.conf /etc/nginx/conf.d/default.conf
# Under /ui/, the path the build expects (vite.config.ts: base "/ui/"). The build lands in
# the backend package's folder (vite.config.ts: outDir), where the wheel picks it up.
COPY --from=build /src/backend/api/console /usr/share/nginx/html/ui
# The base image's unprivileged user (uid 101), stated here so it cannot be lost.
USER 101
EXPOSE 8080
