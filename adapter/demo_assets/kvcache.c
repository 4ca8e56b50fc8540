/* The native helper of the demo inference service (adapter/demo_assets/service.py).
 * `ptdebug demo` compiles it with gcc -g at run time and the service loads it with ctypes.
 * Lines are found by their @ markers. */

/* Writes one request's keys into its cache slot; returns the scale it used.
 * The bug the demo finds: a request with no tokens gives norm 0 and an infinite scale. */
float kv_update(float *cache, int slot, int width, float tokens)
{
    float norm = tokens * 0.5f;          /* @norm */
    float scale = 1.0f / norm;           /* @scale */
    float *row = cache + slot * width;
    for (int i = 0; i < width; i++) {
        row[i] = scale * (float)(i + 1); /* @store */
    }
    return scale;                        /* @return */
}
