// Removes the previous build from dist/ but keeps dist/.keep (see vite.config.ts).
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const dist = new URL('../dist/', import.meta.url).pathname;
for (const name of readdirSync(dist)) {
  if (name !== '.keep') rmSync(join(dist, name), { recursive: true, force: true });
}
