package fleet

// DiscoverModel is the first model a ready endpoint's /v1/models lists;
// "" when none names one.
func (p *Pool) DiscoverModel() string {
	for _, v := range p.View() {
		if v.State == StateReady && len(v.Info.Models) > 0 && v.Info.Models[0] != "" {
			return v.Info.Models[0]
		}
	}
	return ""
}

// PoolConfig fills in what cfg takes from the server flags.
func (f *ServerFlags) PoolConfig(cfg Config) Config {
	cfg.APIKey, cfg.HealthPath, cfg.Model, cfg.ContextLength = f.APIKey, f.HealthPath, f.Model, f.ContextLength
	return cfg
}
