/** The monotonic clock, in milliseconds, that every local deadline is counted in. */
export const now = (): number => performance.now();
