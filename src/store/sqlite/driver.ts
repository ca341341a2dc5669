/**
 * better-sqlite3, in the major that works on this Node: 13 (`better-sqlite3-napi`, an npm alias) where Node-API
 * 10 is there (Node 22.14 and later), 12 otherwise (Node 20). Both are pinned in the one lock file.
 *
 * Why not 12 everywhere: 12 is built against Node's own headers, and from Node 24's headers every
 * node::ObjectWrap unregisters an environment cleanup hook in its destructor, which asserts when V8 collects
 * a Statement with no context entered: the process aborts (`RemoveEnvironmentCleanupHook … (env) != nullptr`,
 * from `Statement::~Statement`), at exit or mid-run, wherever a statement becomes garbage. 13 is a Node-API
 * addon (prebuilt, no compiler at install) without that wrapper. Why not 13 everywhere: it needs Node-API 10,
 * which Node 20 lacks.
 */
import { createRequire } from 'node:module'
import type DatabaseModule from 'better-sqlite3'

/** The npm name the loaded driver is installed under. */
export const SQLITE_DRIVER = Number(process.versions.napi) >= 10 ? 'better-sqlite3-napi' : 'better-sqlite3'

/** better-sqlite3's Database constructor (both majors share the API the store uses). */
export const Database = createRequire(import.meta.url)(SQLITE_DRIVER) as typeof DatabaseModule
