package lab_test

import (
	"fmt"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

func ExampleParseChaos() {
	for _, spec := range []string{"pause:holder@3s+2.5s", "skew:node2=-500ms", "kill:node4"} {
		c, err := lab.ParseChaos(spec)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %s of %s at %s for %s (offset %s)\n", c, c.Kind, c.Target, c.At, c.For, c.Offset)
	}
	// Output:
	// pause:holder@3s+2.5s: pause of holder at 3s for 2.5s (offset 0s)
	// skew:node2=-500ms: skew of node2 at 0s for 0s (offset -500ms)
	// chaos "kill:node4": missing @AT (want kill:TARGET@AT)
}

func ExampleLookupStrategy() {
	s, _ := lab.LookupStrategy("redis")
	fmt.Printf("%s (%s mode, %s token): fenced, %s\n", s.Name, s.Mode, s.Token, s.Guarantee(true))
	// Output:
	// redis (lease mode, lease token): fenced, ledger kept, a tick may run twice
}
