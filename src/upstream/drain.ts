/**
 * The drain (spec §8, issue #13 §7): inference requests are counted from the route's first line to their
 * response's end (or the client's going away), so a shutdown can wait for exactly those. A request that
 * arrives once the drain began (on a kept-alive connection; the listener is closed) gets 503 at once.
 *
 * The count is kept by a thin Reply around the front end's: one object and a few forwarding calls per
 * request, no timer and no event.
 */
import { RouterError } from '../errors.js'
import type { Handler } from '../server/app.js'
import { watchAnswer, type AnswerHooks } from '../server/reply.js'
import { sendError } from '../server/respond.js'
import { publishRefused } from '../telemetry/events.js'

export class InFlight implements AnswerHooks {
  count = 0
  draining = false
  #idle: (() => void)[] = []

  /** The route of inference `surface`, with its requests counted and refused once the drain began. */
  track(handler: Handler, surface: string): Handler {
    return (head, reply) => {
      if (this.draining) {
        const err = new RouterError('no_available_provider', 'the router is shutting down')
        sendError(reply, err, head.requestId, ['x-request-id', head.requestId, 'Connection', 'close'])
        publishRefused(head, surface, '', false, err.status, err.code)
        return
      }
      this.count++
      handler(head, watchAnswer(reply, this))
    }
  }

  /** A request it counts is over (AnswerHooks.over: its answer ended, or its client left). */
  over(): void {
    this.count--
    if (this.count === 0 && this.#idle.length > 0) {
      const waiting = this.#idle
      this.#idle = []
      for (const fn of waiting) fn()
    }
  }

  /** Resolves true once no request is in flight, false if `ms` passed first. */
  idle(ms: number): Promise<boolean> {
    if (this.count === 0) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#idle = this.#idle.filter((fn) => fn !== onIdle)
        resolve(false)
      }, ms)
      const onIdle = (): void => {
        clearTimeout(timer)
        resolve(true)
      }
      this.#idle.push(onIdle)
    })
  }
}
