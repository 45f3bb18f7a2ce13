// `node dist/tools/client/main.js`: the last step of `npm run build` (generate.ts).

import { generateClient } from './generate.js';

process.exitCode = await generateClient();
