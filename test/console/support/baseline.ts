// Screenshots held to committed baselines: a PNG is compared pixel by pixel
// (pixelmatch, which discounts anti-aliasing) with test/console/baselines/<name>.png
// and passes when the share of differing pixels is within a tolerance. On a
// mismatch the new picture and a diff (differences in red) are saved under
// test-results/console/ to look at. HANDSET_CONSOLE_BASELINES=update writes the
// new pictures as the baselines instead, those that no longer match only.

import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import pixelmatch from 'pixelmatch';
import { PNG } from 'pngjs';
import { ARTIFACTS_DIR } from './browser.js';

export const BASELINES_DIR = path.resolve('test/console/baselines');
export const UPDATING_BASELINES = process.env['HANDSET_CONSOLE_BASELINES'] === 'update';

/** How far a pixel's colour may move before it counts as different (pixelmatch's 0..1 threshold). */
const PIXEL_THRESHOLD = 0.1;

/**
 * Compares `png` with the baseline `name`; answers null when it matches (or was
 * written as the new baseline), or why it does not.
 * @param maxShare the share of pixels (0..1) that may differ
 */
export async function differsFromBaseline(name: string, png: Buffer, maxShare: number): Promise<string | null> {
  const file = path.join(BASELINES_DIR, `${name}.png`);
  const stored = await readFile(file).catch(() => null);
  const why = stored ? await compare(name, stored, png, maxShare) : null;
  if (UPDATING_BASELINES) {
    // a picture within the tolerance keeps its baseline, so an update rewrites only what changed
    if (!stored || why) {
      await mkdir(BASELINES_DIR, { recursive: true });
      await writeFile(file, png);
    }
    return null;
  }
  if (!stored) {
    return `no baseline ${path.relative(process.cwd(), file)} (saw ${await saveActual(name, png)}); make one with HANDSET_CONSOLE_BASELINES=update`;
  }
  return why;
}

async function saveActual(name: string, png: Buffer): Promise<string> {
  await mkdir(ARTIFACTS_DIR, { recursive: true });
  const actual = path.join(ARTIFACTS_DIR, `${name}.actual.png`);
  await writeFile(actual, png);
  return actual;
}

/** Why `png` is not its baseline `stored` (its size, or too many pixels differ), or null when it is. */
async function compare(name: string, stored: Buffer, png: Buffer, maxShare: number): Promise<string | null> {
  if (stored.equals(png)) return null;
  const [want, got] = [PNG.sync.read(stored), PNG.sync.read(png)];
  if (want.width !== got.width || want.height !== got.height) {
    return `${name} is ${got.width}×${got.height} px, its baseline ${want.width}×${want.height} (saw ${await saveActual(name, png)})`;
  }
  const diff = new PNG({ width: want.width, height: want.height });
  const differing = pixelmatch(want.data, got.data, diff.data, want.width, want.height, { threshold: PIXEL_THRESHOLD });
  const share = differing / (want.width * want.height);
  if (share <= maxShare) return null;
  const actual = await saveActual(name, png);
  const diffFile = path.join(ARTIFACTS_DIR, `${name}.diff.png`);
  await writeFile(diffFile, PNG.sync.write(diff));
  return `${name}: ${differing} pixels (${(share * 100).toFixed(3)}%) differ from its baseline, more than ${(maxShare * 100).toFixed(3)}% (saw ${actual}, diff ${diffFile})`;
}
