package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
)

func init() { commands = append(commands, newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var (
		scenario string
		workers  int
		speed    float64
		theme    string
		refresh  time.Duration
		format   string
		pd       string
		models   int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "start a simulated pool on loopback and open the console on it",
		Long: `demo starts the built-in simulated pool (workers speaking vLLM's real wire
formats, a cache-aware router writing decisions) on 127.0.0.1 and opens the
console on it over the real sockets. Scenarios: ` + strings.Join(sim.Scenarios(), ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The flags first: a mistake is told before anything starts.
			if err := pdWorkers(cmd, pd, &workers); err != nil {
				return &exitError{code: 2, msg: "demo: " + err.Error()}
			}
			if err := sim.CheckWorkers(workers); err != nil {
				return &exitError{code: 2, msg: "demo: " + err.Error()}
			}
			if refresh != 0 && refresh < pool.MinRefresh {
				return &exitError{code: 2, msg: fmt.Sprintf("--refresh: %s is below the floor of %s", refresh, pool.MinRefresh)}
			}
			if err := sim.CheckDecisionsFormat(format); err != nil {
				return &exitError{code: 2, msg: "demo: --decisions-format: " + err.Error()}
			}
			// Without a terminal: the same simulated pool, headless.
			if err := needTTY(fmt.Sprintf("`%s sim --write-config sim.yaml`, then `%s snapshot -c sim.yaml --for 5s --format text`", self(), self())); err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			s, err := sim.Start(ctx, sim.Options{Workers: workers, Scenario: scenario, Speed: speed, Listen: "127.0.0.1", DecisionsFormat: format, PD: pd, Models: models})
			if err != nil {
				return &exitError{code: 1, msg: fmt.Sprintf("demo: %v", err)}
			}
			defer s.Close()
			c := s.Config()
			if theme != "" {
				c.Theme = theme
			}
			if refresh != 0 {
				c.Refresh = refresh
			}
			if errs := c.Validate(); len(errs) > 0 {
				for _, e := range errs {
					switch e.Key { // the values the operator gave
					case "theme":
						e.Flag = "--theme"
					case "refresh":
						e.Flag = "--refresh"
					}
				}
				return &exitError{code: 2, err: errs}
			}
			return runTUI(ctx, c, func() string { return "demo " + scenario + ": " + s.Phase() })
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", "tour", "scenario to run: "+strings.Join(sim.Scenarios(), ", "))
	cmd.Flags().IntVar(&workers, "workers", 6, "simulated workers")
	cmd.Flags().IntVar(&models, "models", 1, "models the pool serves: 1, or 2 (odd workers serve a second model)")
	cmd.Flags().StringVar(&pd, "pd", "", "a disaggregated pool: `P:D` prefill and decode workers (e.g. 2:4)")
	cmd.Flags().Float64Var(&speed, "speed", 1, "time compression of the scenario timeline")
	cmd.Flags().StringVar(&theme, "theme", "", "theme: default, dark, light, high-contrast, mono")
	cmd.Flags().DurationVar(&refresh, "refresh", 0, fmt.Sprintf("UI refresh (default 1s; floor %s)", pool.MinRefresh))
	cmd.Flags().StringVar(&format, "decisions-format", "kvtop", "the router's decision log: kvtop, dynamo-trace (Dynamo's request traces) or smg (the SGLang model gateway's lines)")
	return cmd
}
