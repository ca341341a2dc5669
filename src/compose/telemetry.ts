/** Telemetry subscribes to the engine's events (DESIGN.md §5); with none configured, nothing is published at all. */
import type { Config } from '../config/index.js'
import type { Metrics } from '../telemetry/metrics.js'
import { part, type Part } from './part.js'
import { TELEMETRY, type TelemetrySources } from './table.js'

export async function telemetryPart(config: Config, sources: TelemetrySources): Promise<Part<{ metrics: Metrics | null }>> {
  const running: { close(): void | Promise<void> }[] = []
  const stop = async (): Promise<void> => {
    for (const subscriber of running.splice(0)) await subscriber.close()
  }
  let metrics: Metrics | null = null
  try {
    for (const [name, subscriber] of Object.entries(TELEMETRY)) {
      if (!subscriber.wanted(config)) continue
      const started = await subscriber.start(config, sources)
      if (name === 'metrics') metrics = started as Metrics
      running.push(started)
    }
  } catch (err) {
    await stop()
    throw err
  }
  return part({ metrics }, stop)
}
