import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// The browser only ever talks to this server: it forwards /api to the backend, so the API needs no CORS
// setup. API_PROXY_TARGET points it at a backend elsewhere than http://localhost:8000.
const apiProxy = { '/api': process.env.API_PROXY_TARGET || 'http://localhost:8000' };

export default defineConfig({
  plugins: [react()],
  server: { port: 5173, strictPort: true, proxy: apiProxy },
  preview: { port: 5173, strictPort: true, proxy: apiProxy },
});
