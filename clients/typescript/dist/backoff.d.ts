/** Reconnection delays: exponential from `minDelayMs`, at most `maxDelayMs`, with jitter. */
export interface Backoff {
    /** The first delay, in ms (default 1,000). */
    minDelayMs: number;
    /** The largest delay, in ms (default 10,000). */
    maxDelayMs: number;
}
/** The defaults of {@link Backoff}: 1 s doubling to 10 s. */
export declare const DEFAULT_BACKOFF: Backoff;
/**
 * The delay before reconnection attempt `attempt` (0 for the first), in ms: `min(max, min × 2^attempt)` scaled by a
 * random factor in [0.5, 1), so that many clients dropped at once do not come back at once.
 */
export declare function backoffDelay(attempt: number, { minDelayMs, maxDelayMs }: Backoff, random?: () => number): number;
