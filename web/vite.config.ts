import { defineConfig } from 'vite';

// The build goes to web/dist, which web/embed.go embeds into the server.
// dist/.keep must survive (the embed pattern needs the directory), so the
// output directory is not emptied: scripts/clean.mjs removes the previous
// build's files first.
export default defineConfig({
  build: {
    outDir: 'dist',
    emptyOutDir: false,
    assetsDir: 'assets',
    // No inline scripts: the server's Content-Security-Policy forbids them.
    modulePreload: { polyfill: false },
    chunkSizeWarningLimit: 1200,
    target: 'es2022',
  },
  server: {
    // npm run dev: the API of a server started with --listen 127.0.0.1:8090.
    proxy: { '/api': 'http://127.0.0.1:8090' },
  },
});
