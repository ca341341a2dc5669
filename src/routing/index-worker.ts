/** Piscina worker: builds the routing index off the event loop (see index-build.ts). */
import { buildIndex, type IndexInput, type IndexOutput } from './index-build.js'

export default function buildIndexTask(input: IndexInput): IndexOutput {
  return buildIndex(input)
}
