package policy_test

import (
	"fmt"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func ExampleTemplate_Units() {
	p := policy.Default()
	t := policy.Template{Name: "llama-7b", PeakBytes: size.MustParse("14.5GiB")}
	fmt.Println(t.Cap(p), uint64(t.Cap(p)), t.Units(p))
	items, _ := policy.EncodeTemplate(t)
	fmt.Println(items["peak_bytes"])
	// Output:
	// 18.07GiB 19404644916 19
	// 15569256448
}
