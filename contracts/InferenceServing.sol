// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/**
 * A registry of inference services with the ABI of the 0G Compute Network's InferenceServing contract, as far as
 * svc-router reads it: the `Service` struct in its field order, `getAllServices(offset, limit)`, the service
 * events, the provider's stake and the owner's acknowledgement of a TEE signer. Written for svc-router's tests
 * and its `demo:chain`; it keeps no user accounts and settles no fees.
 *
 * A provider registers from its own account with at least MIN_PROVIDER_STAKE (returned when it removes its
 * service); an update sends no value. Removal swaps the last service into the freed slot, so entries move:
 * a reader sweeps the whole list rather than patching a copy.
 */
struct Service {
    address provider;
    string serviceType;
    string url;
    uint inputPrice;
    uint outputPrice;
    uint updatedAt;
    string model;
    string verifiability;
    string additionalInfo;
    address teeSignerAddress;
    bool teeSignerAcknowledged;
}

struct ServiceParams {
    string serviceType;
    string url;
    string model;
    string verifiability;
    uint inputPrice;
    uint outputPrice;
    string additionalInfo;
    address teeSignerAddress;
}

contract InferenceServing {
    uint public constant MIN_PROVIDER_STAKE = 100 ether;
    uint public constant MAX_PAGE = 50;

    address public owner;
    Service[] private services;
    /** Position + 1 of a provider's service in `services`; 0 when it has none. */
    mapping(address => uint) private slot;
    mapping(address => uint) public stakes;

    event ServiceUpdated(
        address indexed service,
        string serviceType,
        string url,
        uint inputPrice,
        uint outputPrice,
        uint updatedAt,
        string model,
        string verifiability
    );
    event ServiceRemoved(address indexed service);
    event ProviderTEESignerAcknowledged(address indexed provider, address indexed teeSignerAddress, bool acknowledged);
    event ProviderStaked(address indexed provider, uint amount);
    event ProviderStakeReturned(address indexed provider, uint amount);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    error ServiceNotExist(address provider);
    error InsufficientStake(uint sent, uint required);
    error StakeOnUpdate();
    error NotOwner(address caller);
    error PageTooLarge(uint limit, uint max);

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    constructor() {
        owner = msg.sender;
        emit OwnershipTransferred(address(0), msg.sender);
    }

    function transferOwnership(address newOwner) external onlyOwner {
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    /** Registers (with the stake) or updates (without value) the caller's service. A new TEE signer needs a new acknowledgement. */
    function addOrUpdateService(ServiceParams calldata params) external payable {
        uint at = slot[msg.sender];
        if (at == 0) {
            if (msg.value < MIN_PROVIDER_STAKE) revert InsufficientStake(msg.value, MIN_PROVIDER_STAKE);
            stakes[msg.sender] = msg.value;
            emit ProviderStaked(msg.sender, msg.value);
            services.push();
            at = services.length;
            slot[msg.sender] = at;
            services[at - 1].provider = msg.sender;
        } else if (msg.value != 0) {
            revert StakeOnUpdate();
        }
        Service storage s = services[at - 1];
        if (s.teeSignerAddress != params.teeSignerAddress) s.teeSignerAcknowledged = false;
        s.serviceType = params.serviceType;
        s.url = params.url;
        s.model = params.model;
        s.verifiability = params.verifiability;
        s.inputPrice = params.inputPrice;
        s.outputPrice = params.outputPrice;
        s.additionalInfo = params.additionalInfo;
        s.teeSignerAddress = params.teeSignerAddress;
        s.updatedAt = block.timestamp;
        emit ServiceUpdated(msg.sender, s.serviceType, s.url, s.inputPrice, s.outputPrice, s.updatedAt, s.model, s.verifiability);
    }

    /** Removes the caller's service and returns its stake. */
    function removeService() external {
        uint at = slot[msg.sender];
        if (at == 0) revert ServiceNotExist(msg.sender);
        uint last = services.length;
        if (at != last) {
            services[at - 1] = services[last - 1];
            slot[services[at - 1].provider] = at;
        }
        services.pop();
        delete slot[msg.sender];
        uint stake = stakes[msg.sender];
        delete stakes[msg.sender];
        emit ServiceRemoved(msg.sender);
        if (stake > 0) {
            emit ProviderStakeReturned(msg.sender, stake);
            (bool ok, ) = payable(msg.sender).call{value: stake}("");
            require(ok, "stake transfer failed");
        }
    }

    function acknowledgeTEESignerByOwner(address provider) external onlyOwner {
        Service storage s = _service(provider);
        s.teeSignerAcknowledged = true;
        emit ProviderTEESignerAcknowledged(provider, s.teeSignerAddress, true);
    }

    function revokeTEESignerAcknowledgement(address provider) external onlyOwner {
        Service storage s = _service(provider);
        s.teeSignerAcknowledged = false;
        emit ProviderTEESignerAcknowledged(provider, s.teeSignerAddress, false);
    }

    function serviceExists(address provider) external view returns (bool) {
        return slot[provider] != 0;
    }

    function getService(address provider) external view returns (Service memory service) {
        return _service(provider);
    }

    /** Services [offset, offset + limit) and how many there are in all; at most MAX_PAGE a call. */
    function getAllServices(uint offset, uint limit) external view returns (Service[] memory list, uint total) {
        if (limit > MAX_PAGE) revert PageTooLarge(limit, MAX_PAGE);
        total = services.length;
        if (offset >= total) return (new Service[](0), total);
        uint end = offset + limit > total ? total : offset + limit;
        list = new Service[](end - offset);
        for (uint i = offset; i < end; i++) list[i - offset] = services[i];
    }

    function _service(address provider) private view returns (Service storage) {
        uint at = slot[provider];
        if (at == 0) revert ServiceNotExist(provider);
        return services[at - 1];
    }
}
