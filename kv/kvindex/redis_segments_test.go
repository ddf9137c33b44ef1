package kvindex

import (
	"strings"
	"testing"
)

// The key schema is versioned: a fresh prefix gets the schema key, one
// written by another layout stops NewRedis, and schema-1 block keys left
// under the prefix are found (and logged) on every master.
func TestRedisSchemaVersion(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			c := tg.client()
			prefix := uniquePrefix(t)
			r := newTestRedis(t, c, RedisConfig{Prefix: prefix})
			if v := c.Get(tctx, prefix+"schema").Val(); v != redisSchema {
				t.Fatalf("schema key %q; want %q", v, redisSchema)
			}
			found, err := r.findSchema1(tctx)
			must(t, err)
			if found {
				t.Fatal("schema-1 keys found under a fresh prefix")
			}
			// Schema-1 block keys spread over the slots, as that layout left them.
			for h := uint64(1); h <= 8; h++ {
				must(t, c.HSet(tctx, prefix+"b:"+blockField(h*0x9E3779B97F4A7C15), "1:0", "0").Err())
			}
			if found, err = r.findSchema1(tctx); err != nil || !found {
				t.Fatalf("schema-1 keys not found (err %v)", err)
			}
			// Another instance on the same prefix agrees with the key.
			newTestRedis(t, c, RedisConfig{Prefix: prefix})

			must(t, c.Set(tctx, prefix+"schema", "9", 0).Err())
			_, err = NewRedis(tctx, RedisConfig{Client: c, Prefix: prefix})
			if err == nil || !strings.Contains(err.Error(), "another key layout") {
				t.Fatalf("NewRedis on a schema-9 prefix: err %v; want a refusal naming the layout", err)
			}
			dropPrefix(t, c, prefix)
		})
	}
}
