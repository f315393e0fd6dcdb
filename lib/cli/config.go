package cli

import "context"

// RunConfig is a command's Run: its flags become a config value once
// (config, which checks them), and run, a method of that value, does the
// work from it alone, never reading the flag struct:
//
//	func (c *Command) Run(ctx context.Context, env *cli.Env) error {
//		return cli.RunConfig(ctx, env, c.config, Config.Run)
//	}
func RunConfig[C any](ctx context.Context, env *Env, config func() (C, error), run func(C, context.Context, *Env) error) error {
	cfg, err := config()
	if err != nil {
		return err
	}
	return run(cfg, ctx, env)
}
