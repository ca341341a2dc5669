/** Configuration: one schema, loaded once from YAML + `SVC_*` env, then frozen (DESIGN.md §3). */

export { ConfigSchema, MAX_TIMER_MS, PATH_KEYS, type Config, type DeepReadonly } from './schema.js'
export { CONFIG_LEAVES, ConfigError, deepFreeze, envName, loadConfig, type ConfigLeaf, type LoadConfigOptions } from './load.js'
export { RENAMED_CONFIG_KEYS, closest, describeIssues, editDistance, FileProblemsError, formatPath, yamlErrorLine, type RenamedKey } from './hints.js'
